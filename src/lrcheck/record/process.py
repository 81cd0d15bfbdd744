"""The recording inside one process of a recorded command: torch's global optimizer step hooks
(``register_optimizer_step_pre_hook`` / ``_post_hook``), which fire for every optimizer of the
process, whatever framework steps it.

Per optimizer update it writes one Recorder line (``lrcheck.recorder``): the LR of every param
group (read in the pre-hook, as the step is about to use it), the optimizer's class, other settings
and state's keys (``lrcheck.hparams``), the ``scheduler.step()`` calls made on the optimizer since
the previous update, the steps a GradScaler skipped since then, and every ``every``-th update
(every update of a lockstep pair once lockstep is off: ``dense``) the gradient norm and a parameter
fingerprint, taken in the post-hook (where Lightning, which runs the last backward inside
``optimizer.step`` through its closure, has the final gradients and parameters).

What it guards against: an optimizer subclass whose ``step`` calls ``super().step()`` fires the
hooks twice (only the outermost step counts); DeepSpeed's bf16 wrapper steps once at construction
with no gradient (a step where no parameter has a gradient is counted as a phantom step, not
recorded); a GradScaler-skipped step fires no hook (``GradScaler.step`` is wrapped to count it);
parameters sharded as DTensors (FSDP2, HSDP, tensor parallel) are fingerprinted on this rank's
shard, which ``record.folder`` merges by placement (``record.placed``).

The cadence (``count_calls``): per update, how many times since the optimizer's previous update the
process ran a backward pass (the outermost ``torch.autograd.backward``, which ``Tensor.backward``
calls), ``zero_grad`` (the optimizer's, or a module's), how many backward passes ran since the last
``zero_grad`` (those whose gradients reach the update), the gradient clipping of ``torch.nn.utils``
(with its ``max_norm`` / ``clip_value`` and the pre-clip norm its last call returned),
``GradScaler.update`` and the EMA's ``AveragedModel.update_parameters`` (and timm's, diffusers',
DeepSpeed's clipping once imported: ``record.calls.IMPORTED``); and the optimizer state's own step
counter. And the loss each update differentiated (``record.losses``), read with the clip's norm
once per update, one transfer; no other tensor is read but on the updates that are fingerprinted
anyway, where the EMA model is fingerprinted too (``record.ema``)."""

from __future__ import annotations

import atexit
import functools
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
from torch.optim.lr_scheduler import LRScheduler
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

from lrcheck.procs.determinism import in_effect
from lrcheck.record import ema, guard, lockstep, modules, optimizers, precision, roles, stages, taps
from lrcheck.record.birth import BORN, fingerprint_at_birth
from lrcheck.record.calls import (
    Args,
    Imported,
    Kwargs,
    count_calls,
    count_scheduler_steps,
    pre_clip_norm,
    subclasses,
)
from lrcheck.record.losses import Losses
from lrcheck.record.pipeline import STAGE_WHY
from lrcheck.record.placements import Layout, data_world, grad_keys, layout, shared_rows
from lrcheck.record.rollouts import rank_and_world as _rank_and_world
from lrcheck.recorder import Recorder, fingerprint, pack_fed

# The calls counted per update (``count_calls``), each a key of the Recorder line.
CALLS = ("backward", "module_zero_grad", "clip_grad_norm", "clip_grad_value", "scaler_update",
         "ema_update")


class _Optimizer:
    """What is recorded of one optimizer of this process."""

    def __init__(self, index: int, recorder: Recorder, optimizer: torch.optim.Optimizer,
                 params: list[torch.Tensor], wrapper: type | None) -> None:
        self.index, self.recorder = index, recorder
        self.optimizer = optimizer
        self.cls = optimizers.name(type(optimizer))
        self.wrapper = None if wrapper is None else optimizers.name(wrapper)
        self.tensors = len(params)
        # ZeRO's optimizers (stages 1-3, and bf16's) step this optimizer on flat partitions of
        # the model's parameters, a different one on each rank.
        self.partitioned = wrapper is not None and any(
            c.__name__ == "ZeROOptimizer" and c.__module__.startswith("deepspeed")
            for c in wrapper.__mro__)
        self.sharded = self.partitioned or any(hasattr(p, "to_local") for p in params)
        self.depth = 0
        self.lr: list[float] = []
        self.settings = optimizers.Settings(self.cls)
        self.scheduler_steps = 0
        self.skipped = 0
        self.phantom = 0
        self.dtype = lockstep.dtype_of(params)
        self.names: list[str] | None = None
        self.stochastic: list[dict[str, Any]] = []
        self.seen: dict[str, int] = {}  # the process's call totals at this optimizer's update
        self.layout: Layout | None = None  # its DTensors' (``record.placements``)
        self.rng: dict[str, int] = {}  # the RNGs at its update's step (``stages.rng_prints``)


class ProcessRecorder:
    """The optimizers of this process, each recorded into ``folder`` as ``rank{R}.jsonl``
    (its first optimizer) or ``rank{R}-opt{I}.jsonl``, with ``rank{R}.json`` describing the
    process. ``samples``: samples per update (None: updates are counted, 1 each)."""

    def __init__(self, folder: Path, samples: int | None, every: int,
                 deterministic: bool = False) -> None:
        self.folder, self.samples, self.every = folder, samples, every
        self.deterministic = deterministic
        self.optimizers: dict[int, _Optimizer] = {}
        self.pending: dict[int, list[int]] = {}  # id(optimizer) → [scheduler steps, skipped]
        self.stepped: dict[int, int] = {}  # id(optimizer) → pre-hooks seen, for GradScaler
        self.name: str | None = None
        self.later = bool(os.environ.get(roles.ENV_RESUMED))  # a resume's process: it runs free
        self.world = 1
        self.role = os.environ.get(roles.ENV_ROLE, "")
        self.exchange = Path(os.environ.get(roles.ENV_EXCHANGE, "") or ".")
        self.streamer: lockstep.Streamer | None = None
        self.follower: lockstep.Follower | None = None
        # The cadence: the process's totals of each call counted (``CALLS``), per optimizer its
        # zero_grad calls and the backward total at its last one, and the last clip's settings.
        self.totals = dict.fromkeys(CALLS, 0)
        self.zeroed: dict[int, list[int]] = {}  # id(optimizer) → [zero_grad calls, backward]
        self.module_zeroed = -1  # the backward total at the last Module.zero_grad (-1: none)
        self.clip: dict[str, Any] = {}  # max_norm, clip_value, the last pre-clip norm
        # The samples and loss weights of each update (``record.taps``), and the GradScaler
        # that last stepped an optimizer (its scale divides the weights).
        self.taps = taps.Taps()
        self.scaler: Any = None
        self.losses = Losses()  # the values backward was called on (``record.losses``)
        # The EMA model fingerprinted beside the model (``record.ema``), and the calls counted
        # once their modules are imported (``record.calls.IMPORTED``).
        self.ema = ema.EmaWatch()
        self.imported: Imported | None = None
        self.logs: list[dict[str, str]] = []  # the trainers' log folders (``modules``)
        self.off: dict[str, Any] | None = None  # why its guard switched the recording off
        self.lockstep = guard.Guard("lockstep")  # armed with the side's stop at its start
        self.standing = stages.Standing()  # where it began and ended (``record.stages``)

    def _claim(self) -> str:
        """This process's file name stem, ``rank{R}`` (``rank{R}-p{pid}`` when another process
        of the command took that rank's name already)."""
        rank, self.world = _rank_and_world()
        for stem in (f"rank{rank}", f"rank{rank}-p{os.getpid()}"):
            try:
                os.close(os.open(self.folder / f"{stem}.json", os.O_CREAT | os.O_EXCL))
                self.later = self.later or "-p" in stem  # a later process of its rank
                return stem
            except FileExistsError:
                continue
        raise RuntimeError(f"rank {rank}'s files exist twice in {self.folder}")

    def state(self, optimizer: torch.optim.Optimizer) -> _Optimizer:
        found = self.optimizers.get(id(optimizer))
        if found is None:
            self.name = self.name or self._claim()
            index = len(self.optimizers)
            stem = self.name if index == 0 else f"{self.name}-opt{index}"
            found = _Optimizer(index, Recorder(self.folder / f"{stem}.jsonl"), optimizer,
                               optimizers.params(optimizer), optimizers.stepped_by(optimizer))
            self.optimizers[id(optimizer)] = found
            found.layout = layout(optimizers.params(optimizer), self.world)
            self.describe()
        return found

    def describe(self) -> None:
        if self.name is None:
            return
        text = json.dumps({
            "pid": os.getpid(), "rank": int(self.name[4:].split("-")[0]), "world": self.world,
            "argv": sys.argv, "torch": torch.__version__,
            "optimizers": [{"index": o.index, "file": o.recorder.path.name,
                            "class": o.cls, "wrapper": o.wrapper, "tensors": o.tensors,
                            "sharded": o.sharded, "partitioned": o.partitioned,
                            "updates": o.recorder.step, "phantom_steps": o.phantom,
                            "dtype": o.dtype, "stochastic": o.stochastic,
                            **({"layout": o.layout} if o.layout else {})}
                           for o in self.optimizers.values()],
            "dropout_calls": modules.calls[0], "lockstep": self.role or None,
            "deterministic": in_effect(self.world) if self.deterministic else None,
            "logs": self.logs, "recording_off": self.off,
            **self.standing.described(self.optimizers, self.scaler)}, indent=1)
        (self.folder / f"{self.name}.json").write_text(text + "\n", encoding="utf-8")

    def switch_off(self, why: str) -> None:
        """The recording off (``record.guard``), lockstep with it; the description says why."""
        first = next(iter(self.optimizers.values()), None)
        self.off = {"reason": why, "after": 0 if first is None else first.recorder.step}
        if self.role in (roles.REFERENCE, roles.CANDIDATE):
            self.lockstep.trip(f"the recording is off ({why})")
        self.describe()

    def pre(self, optimizer: torch.optim.Optimizer, args: Args, kwargs: Kwargs) -> None:
        self.stepped[id(optimizer)] = self.stepped.get(id(optimizer), 0) + 1
        st = self.state(optimizer)
        st.depth += 1
        if st.depth > 1:  # super().step() of a subclass: the outer step is the update
            return
        st.lr = [float(g["lr"]) for g in optimizer.param_groups]
        st.rng = stages.rng_prints() if st.index == 0 else {}
        st.settings.before(optimizer)
        steps, skipped = self.pending.pop(id(optimizer), [0, 0])
        st.scheduler_steps, st.skipped = steps, skipped
        if self.imported is not None:
            self.imported.look()
        if st.index == 0 and self.name is not None:
            self.ema.at_update(st.recorder.step, self.every, self._ema_path())
        if st.names is None:
            self._first_update(st, optimizers.params(optimizer))

    def _first_update(self, st: _Optimizer, params: list[torch.Tensor]) -> None:
        """Before the first update of ``st``: its model's names (in its layout too, in a run
        of several processes) and stochastic layers, and, in a lockstep pair (the first
        optimizer only), the start of the exchange."""
        model = modules.owner(params)
        st.names, st.stochastic = modules.names(params, model), modules.stochastic(model)
        if self.world > 1 and not (st.layout or {}).get("names"):  # for ``record.experts``
            st.layout = {**shared_rows(st.layout, params, model, self.world), "names": st.names}
        if st.index == 0:
            self.logs = modules.log_folders()
        self.describe()
        if st.index == 0 and os.environ.get(roles.ENV_NUDGE):
            optimizers.nudge(params)
        if st.index != 0 or self.role not in (roles.REFERENCE, roles.CANDIDATE) \
                or self.later:
            return
        rank = int(self.name[4:].split("-")[0]) if self.name else 0
        born = getattr(st.optimizer, BORN, None)
        if self.role == roles.REFERENCE and rank == 0:
            self.streamer = lockstep.Streamer(self.exchange)
            self.lockstep.arm(self.streamer.stop)
            self.lockstep("lockstep's start", self.streamer.start)(
                params, st.sharded, born, precision.finish(params), st.optimizer)
        elif self.role == roles.CANDIDATE:
            self.follower = lockstep.Follower(self.exchange, self.folder, rank, self.world)
            self.lockstep.arm(self.follower.stop)
            self.lockstep("lockstep's start", self.follower.start)(
                params, st.names, st.sharded, born, precision.finish(params))

    def post(self, optimizer: torch.optim.Optimizer, args: Args, kwargs: Kwargs) -> None:
        st = self.optimizers.get(id(optimizer))
        if st is None:
            return
        st.depth -= 1
        if st.depth > 0:
            return
        params = optimizers.params(optimizer)
        grads = [optimizers.local_tensor(p.grad) for p in params if p.grad is not None]
        if not grads:  # nothing to update: DeepSpeed bf16's phantom step at construction
            st.phantom += 1
            self.describe()
            return
        extra: dict[str, Any] = {"scheduler_steps": st.scheduler_steps, "skipped": st.skipped,
                                 **st.settings.line(optimizer)}
        fp = None
        if self.every and (st.recorder.step % self.every == 0 or self.dense(st)):
            extra.update(grad_keys(params))
            fp = fingerprint(optimizers.local_tensor(p) for p in params)
        extra.update(self.cadence(st, fp is not None))
        if st.index == 0:
            extra.update(self.fed(data_world(st.layout, self.world), "stage" in (st.layout or ())))
            extra.update(self.losses.take(optimizers.scale(self.scaler)), **st.rng)
        k = st.recorder.step
        st.recorder.log(lr=st.lr, samples=self.samples or 1, fingerprint=fp, extra=extra)
        if st.index == 0:
            side = self.streamer or self.follower
            if side is not None:
                self.lockstep(f"lockstep at update {k}", side.after)(k, optimizer, params)

    def dense(self, st: _Optimizer) -> bool:
        """Whether ``st`` (a lockstep pair's first optimizer) is fingerprinted at every update:
        where lockstep is off (sharded, stopped, a resume's later process; the reference's
        first updates, and all with ``roles.ENV_DENSE``): judged free-running there."""
        side = self.streamer if self.role == roles.REFERENCE else self.follower
        early = self.role == roles.REFERENCE and (st.recorder.step <= lockstep.DEPTH + 1
                                                  or bool(os.environ.get(roles.ENV_DENSE)))
        return st.index == 0 and self.role in (roles.REFERENCE, roles.CANDIDATE) and (
            st.sharded or early or side is not None and bool(side.off)
            or self.role == roles.CANDIDATE and self.later)

    def cadence(self, st: _Optimizer, synced: bool) -> dict[str, Any]:
        """The calls since ``st``'s previous update (``CALLS``, ``zero_grad``, ``reached``), the
        last clip's settings and the optimizer state's step counter, read before lockstep loads
        the reference's state (``synced``: a device tensor may be read, as the fingerprint
        synchronised already)."""
        totals, seen = self.totals, st.seen
        out: dict[str, Any] = {key: totals[key] - seen.get(key, 0) for key in CALLS
                               if key != "module_zero_grad"}
        calls, at = self.zeroed.get(id(st.optimizer), [0, -1])
        out["zero_grad"] = (calls - seen.get("zero_grad", 0)
                            + totals["module_zero_grad"] - seen.get("module_zero_grad", 0))
        out["reached"] = totals["backward"] - max(at, self.module_zeroed, 0)
        st.seen = {**totals, "zero_grad": calls}
        if out["clip_grad_norm"] and "max_norm" in self.clip:
            out["max_norm"] = optimizers.number(self.clip["max_norm"])
            norm = pre_clip_norm(self.clip.pop("norm", None))
            if norm is not None:
                out["clip_norm"] = optimizers.number(norm)
        if out["clip_grad_value"] and "clip_value" in self.clip:
            out["clip_value"] = optimizers.number(self.clip["clip_value"])
        step = optimizers.state_step(st.optimizer, synced)
        if step is not None:
            out["opt_step"] = step
        return out

    def fed(self, world: int, staged: bool = False) -> dict[str, Any]:
        """The samples and loss weights of the micro-batches since the previous update
        (``record.taps``; ``world``: the ranks averaged; ``staged``: a pipeline stage's, whose
        shape inference reruns a micro-batch: the differentiated), as Recorder keys; or none."""
        fed = self.taps.take(optimizers.scale(self.scaler), world, staged)
        if not fed.ids:
            return {}
        out = pack_fed(fed.ids, fed.weights) | fed.packed_tokens()
        if fed.why:
            out["fed_why"] = STAGE_WHY if staged else fed.why
        if fed.dtype:
            out["fed_dtype"] = fed.dtype
        return out

    def zero_grad(self, optimizer: object) -> None:
        found = self.zeroed.setdefault(id(optimizer), [0, -1])
        found[0] += 1
        found[1] = self.totals["backward"]
        first = next(iter(self.optimizers.values()), None)
        if first is None or first.optimizer is optimizer:
            self.taps.zeroed()
            self.losses.zeroed()

    def scheduler_stepped(self, optimizer: object) -> None:
        self.pending.setdefault(id(optimizers.torch_optimizer(optimizer)), [0, 0])[0] += 1

    def scaler_stepping(self, scaler: Any, optimizer: Any) -> tuple[int, int]:
        """Before ``GradScaler.step``: its optimizer's identity and pre-hooks seen so far."""
        inner = optimizers.torch_optimizer(optimizer)
        self.scaler = scaler
        return id(inner), self.stepped.get(id(inner), 0)

    def scaler_stepped(self, before: tuple[int, int] | None) -> None:
        """After ``GradScaler.step``: a step that fired no hook was skipped."""
        if before is not None and self.stepped.get(before[0], 0) == before[1]:
            self.pending.setdefault(before[0], [0, 0])[1] += 1
            self.taps.take(1.0, 1)  # a skipped update's micro-batches fed nothing
            self.losses.zeroed()

    def _ema_path(self) -> Path:
        return self.folder / ema.FILE.format(stem=self.name)

    def close(self) -> None:
        guard.RECORDING.anyway("the recording's end", self._close)  # its files closed
        for side in (self.streamer, self.follower):  # the other side's waits released
            if side is not None:
                side.close()

    def _close(self) -> None:
        self.describe()
        first = next(iter(self.optimizers.values()), None)
        if first is not None and self.name is not None:
            self.ema.at_update(first.recorder.step, self.every, self._ema_path(), last=True)
            self.ema.close(self._ema_path())
        for st in self.optimizers.values():
            st.recorder.close()


def install_hooks(folder: str, *, samples: int | None, every: int,
                  deterministic: bool = False) -> ProcessRecorder:
    """Record every optimizer of this process into ``folder`` (see ``ProcessRecorder``;
    ``deterministic``: its description says what ``--deterministic`` set, as in effect)."""
    recorder = ProcessRecorder(Path(folder), samples, every, deterministic)
    (on := guard.RECORDING).arm(recorder.switch_off)
    modules.count_dropout()
    if recorder.role:
        fingerprint_at_birth()
    pre, post = optimizers.real_steps(recorder.pre, recorder.post)  # not DCP's state's making
    register_optimizer_step_pre_hook(on("optimizer.step's pre-hook", pre))
    register_optimizer_step_post_hook(on("optimizer.step's post-hook", post))
    count_calls(recorder)
    taps.tap(recorder.taps)
    for cls in subclasses(LRScheduler):
        count_scheduler_steps(cls, recorder)
    original_init_subclass = LRScheduler.__dict__.get("__init_subclass__")

    def init_subclass(cls: Any, /, **kwargs: Any) -> None:
        if original_init_subclass is not None:
            original_init_subclass.__func__(cls, **kwargs)
        count_scheduler_steps(cls, recorder)

    LRScheduler.__init_subclass__ = classmethod(init_subclass)  # type: ignore[method-assign,assignment]
    scaler_step = torch.amp.GradScaler.step

    @functools.wraps(scaler_step)
    def step(scaler: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        before = on("GradScaler.step's count", recorder.scaler_stepping)(scaler, optimizer)
        result = scaler_step(scaler, optimizer, *args, **kwargs)
        on("GradScaler.step's count", recorder.scaler_stepped)(before)
        return result

    torch.amp.GradScaler.step = step  # type: ignore[method-assign,assignment]
    (Path(folder) / f".torch-{os.getpid()}").touch()
    atexit.register(recorder.close)
    return recorder
