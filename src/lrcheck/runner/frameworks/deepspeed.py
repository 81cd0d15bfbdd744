"""``--framework deepspeed``: a run trained through the real DeepSpeed engine.

``deepspeed.initialize`` gets lrcheck's seeded model, its optimizer and its schedule (sized in
optimizer updates, as DeepSpeed's users size it), and a config of ``train_micro_batch_size_per_gpu
= bs``, ``gradient_accumulation_steps = accum`` and ``zero_optimization.stage = --zero-stage``, no
clipping. The loop is what DeepSpeed's tutorials write: for every micro-batch of this rank's share
of lrcheck's data order, the mean loss, ``engine.backward(loss)``, ``engine.step()``. The engine
decides the rest (deepspeed/runtime/engine.py, 0.19.8; docs/frameworks.md cites the lines):

- the boundary: ``is_gradient_accumulation_boundary`` is ``(micro_steps + 1) % GAS == 0`` and
  ``micro_steps`` never resets at an epoch, so an epoch's last, partial window runs on into the
  next epoch (DeepSpeed #7439);
- the loss scaling: ``backward`` divides every micro-batch's loss by GAS, whatever its size (a
  partial window's micro-batches weighted equally, its gradient too small);
- the scheduler: ``_take_model_step`` steps the scheduler it was given after each optimizer step
  that was not skipped; ``--scheduler-stepped-too`` makes the loop call ``scheduler.step()`` after
  every ``engine.step()`` as well, the users' mistake (transformers #35484).

lrcheck feeds every sample of each epoch (DeepSpeed owns the epoch's end: ``--tail`` does not
apply) and records through ``integrations.core.Tap`` into the ``Recording``: the LR every param
group will use, read just before the ``engine.step()`` of a boundary, the samples and each
micro-batch's measured weight, the parameters after each update (gathered whole under ZeRO 3).
DeepSpeed reduces float32 (and bf16) gradients only: float64 is refused (``plan.frameworks``).

``--amp bf16`` sets ``bf16.enabled``: the engine casts the module to bfloat16 and keeps float32
master weights in its optimizer wrapper (at ZeRO 0 ``FP16_UnfusedOptimizer``, whose constructor
steps the optimizer once with zero gradients, fp16/unfused_optimizer.py
``initialize_optimizer_states``: AdamW's step count starts at 1 in both runs; lrcheck records no
update and the schedule does not move for it). lrcheck feeds the features in bfloat16, takes the
loss from float32 logits, records the bfloat16 model's parameters, and a step the engine's
overflow check skipped (``was_step_applied``).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from lrcheck.errors import SpecError
from lrcheck.experiments.tasks import Dataset
from lrcheck.integrations.core import Tap
from lrcheck.runner.build import Parts, as_input, build
from lrcheck.runner.frameworks.common import (
    FrameworkRun,
    RecordingSink,
    framework_process,
    process_group,
)
from lrcheck.runner.loss import item_losses
from lrcheck.spec import RunSpec
from lrcheck.trace import OnUpdate, RunTrace


def train(spec: RunSpec, data: Dataset, *, device: str, rank: int = 0,
          on_update: OnUpdate | None = None,
          on_start: Callable[[], None] | None = None) -> RunTrace:
    """``plain.train``'s contract, trained through a ``DeepSpeedEngine``: on the default process
    group lrcheck's torchrun worker made, or alone in a group of one."""
    # Told the accelerator, DeepSpeed does not warn at import that it had to guess it.
    os.environ.setdefault("DS_ACCELERATOR", torch.device(device).type)
    with (framework_process(spec), process_group(spec.world, device),
          _engine_environment(rank)):
        return _train(spec, data, device, rank, on_update, on_start)


@contextlib.contextmanager
def _engine_environment(rank: int) -> Iterator[None]:
    """What the engine needs around it: ``LOCAL_RANK``, which its sanity check asks for even in
    a group it did not make (set by torchrun under several processes); its console lines off
    (INFO, and the warning about the "untested" torch optimizer ZeRO is told to accept); and,
    afterwards, its cached references to the process groups released, so that the next engine
    in this process (the reference after the candidate's job) does not use a group that is
    gone."""
    from deepspeed.utils import groups, logger

    saved = os.environ.get("LOCAL_RANK")
    os.environ.setdefault("LOCAL_RANK", str(rank))
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
        groups._release_process_group_references(None)
        if saved is None:
            os.environ.pop("LOCAL_RANK", None)


def config(spec: RunSpec) -> dict[str, object]:
    """The engine's config for ``spec``."""
    return {"train_micro_batch_size_per_gpu": spec.bs,
            "gradient_accumulation_steps": spec.accum,
            "zero_optimization": {"stage": spec.zero_stage},
            # --amp bf16: the module in bfloat16, float32 master weights in the engine's
            # optimizer wrapper; its other settings DeepSpeed's defaults.
            "bf16": {"enabled": spec.amp == "bf16"},
            # ZeRO tests its own optimizers only; torch's SGD and AdamW need this to be wrapped.
            "zero_allow_untested_optimizer": True,
            "gradient_clipping": 0.0,  # lrcheck compares the unclipped updates
            "steps_per_print": 2**31 - 1, "wall_clock_breakdown": False}


class _Counted:
    """``scheduler.step()`` calls, counted (the engine's and the loop's alike)."""

    def __init__(self, scheduler: Any) -> None:
        self.steps = 0
        step = scheduler.step

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.steps += 1
            return step(*args, **kwargs)

        scheduler.step = counted


def _whole(parts: Parts, stage: int) -> Callable[[], list[torch.Tensor]] | None:
    """The parameters gathered whole, where ZeRO 3 partitions them (None: they are whole)."""
    if stage < 3:
        return None
    from deepspeed.runtime.zero import GatheredParameters

    params = list(parts.net.parameters())

    def whole() -> list[torch.Tensor]:
        with GatheredParameters(params):
            return [p.detach().clone() for p in params]

    return whole


def _without_shm_comm() -> None:
    """DeepSpeed's shared-memory all-reduce (its op ``deepspeed_shm_comm``) not built: its
    ``TorchBackend`` JIT-builds it on the CPU accelerator at every engine's start (comm/torch.py
    ``build_shm_op``; a minute of C++ in each new environment, whose path its build flags hold)
    and maps 69 MB per rank in ``/dev/shm`` that it never unlinks, for ``inference_all_reduce``
    alone, which no training step calls: the engine's gradients go through
    ``torch.distributed`` (gloo here) either way. Marked not compatible, as on a platform
    without it, the op is left out (``deepspeed.ops.__compatible_ops__``, the one dict DeepSpeed
    probes once and keeps)."""
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def _check_bf16() -> None:
    """``--amp bf16`` where DeepSpeed's accelerator has it, else bad input with DeepSpeed's
    reason (engine.py ``_do_sanity_check``; its CPU accelerator says yes on every CPU)."""
    from deepspeed.accelerator import get_accelerator

    if not get_accelerator().is_bf16_supported():
        raise SpecError(f"--amp bf16: DeepSpeed's {get_accelerator().device_name()} accelerator "
                        "has no bfloat16 here (engine.py: \"Type bf16 is not supported on your "
                        "device\"); train without --amp")


def _train(spec: RunSpec, data: Dataset, device: str, rank: int, on_update: OnUpdate | None,
           on_start: Callable[[], None] | None) -> RunTrace:
    import deepspeed

    if spec.amp == "bf16":
        _check_bf16()
    run = FrameworkRun.start(spec, data, device=device, on_update=on_update)
    recording = run.recording
    parts = build(spec, data, run.ctx, device)
    counted = _Counted(parts.scheduler)
    _without_shm_comm()
    with contextlib.redirect_stdout(io.StringIO()):  # whatever the engine prints as it starts
        engine, _, _, _ = deepspeed.initialize(model=parts.net, optimizer=parts.optimizer,
                                               lr_scheduler=parts.scheduler, config=config(spec))
    run.check_processes("DeepSpeed", engine.world_size, engine.global_rank, rank)
    tap = Tap(RecordingSink(recording), device, (spec.world, rank))
    recording.attach(parts.net, _whole(parts, spec.zero_stage))
    if on_start is not None:
        on_start()
    # The features in the module's type (bfloat16 under --amp bf16: the engine casts the
    # module, not its inputs).
    x = as_input(data.x_train, next(parts.net.parameters()).dtype, device)
    y = torch.as_tensor(data.y_train, device=device)
    items = torch.as_tensor(data.items_per_sample(), device=device)
    order = run.order(dealt=False, rank=rank)
    engine.train()
    for epoch, stream in enumerate(order.streams):
        for start in range(0, len(stream), spec.bs):
            idx = torch.from_numpy(np.ascontiguousarray(stream[start:start + spec.bs]))
            # The loss from float32 logits, as transformers' models upcast them under bf16.
            per_item = item_losses(engine, x[idx], y[idx], float_logits=True)
            n = items[idx].sum()
            loss = per_item.sum() / n.clamp(min=1)  # the micro-batch's mean, as users write it
            tap.micro_batch(loss, n, len(idx), idx)
            engine.backward(loss)
            boundary = engine.is_gradient_accumulation_boundary()
            if boundary:
                # The LR the step will use: nothing moves it before the optimizer steps inside
                # engine.step(). (Not a hook on the optimizer's step: ZeRO 1 and 2 step it once
                # per param group, each time with param_groups narrowed to that one group,
                # stage_1_and_2.py _optimizer_step.)
                tap.before_step(parts.optimizer, counted.steps)
                steps_before = counted.steps
            engine.step()
            if spec.scheduler_stepped_too and not recording.step_scheduler(parts.scheduler,
                                                                           len(recording.updates)):
                return run.finish(tap)
            if boundary:
                if not engine.was_step_applied():  # --amp bf16's overflow check skipped it
                    recording.skipped_step(len(recording.updates), counted.steps - steps_before)
                tap.end_update(epoch)
        recording.end_epoch(parts.net, epoch, len(recording.updates) - 1)
    return run.finish(tap)
