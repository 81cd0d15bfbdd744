"""The frameworks a run can train through (``--framework``), as data: which optional dependency
each needs, whether it owns the epoch (cuts each epoch into windows itself, so that lrcheck's
``--tail`` gives way to the framework's own end of epoch and ``--drop-last``), how it sizes a
schedule, and which of lrcheck's general settings apply to it (its own settings, such as
``--drop-last``, are declared in ``spec/settings.py``).

``plain`` is lrcheck's own exact loop (``runner/plain.py``), where ``--policy`` applies; every
other framework decides itself when the optimizer and the scheduler step.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from lrcheck.errors import SpecError

PLAIN = "plain"
# Why a run of a framework cannot run in lockstep (``Framework.no_lockstep``): it owns the loop.
OWN_LOOP = "a framework's own loop trains a run: lrcheck cannot set its state per update"


@dataclass(frozen=True)
class Framework:
    name: str
    description: str
    module: str | None = None  # what it imports, and the extra of the lrcheck package it needs
    owns_epoch: bool = False
    # Accelerate's AcceleratedScheduler steps once per process on each optimizer step
    # (split_batches=False): a schedule is sized in updates of the single-process loader, this
    # run's updates times world (accelerate #1382).
    lengths_times_world: bool = False
    # lrcheck's built-in schedules the framework's own schedule names stand for (None: any).
    schedulers: dict[str, str] | None = None
    # lrcheck's general command-line settings that apply to it; the settings only some
    # frameworks have are declared in spec/settings.py with the frameworks they apply to
    # (``spec.settings_for`` lists both).
    settings: tuple[str, ...] = ()
    # The one floating-point type it trains in (None: either); a run asking for another is
    # given this one, and float32's tolerances.
    dtype: str | None = None
    # It trains in one process here (no --nproc).
    single_process: bool = False
    # It builds its own model and data order from lrcheck's data: compared only with itself.
    own_model: bool = False
    # --resume-at stops its training after update K and resumes it through its own resume; the
    # reference is then the same run uninterrupted.
    resumes: bool = False
    # lrcheck's own loop trains it (its model wrapped another way): --policy applies.
    own_loop: bool = False
    # The floating-point types it cannot train in here, each with the reason.
    refuses_dtype: dict[str, str] | None = None
    # The --amp modes it trains, and those it cannot here, each with the reason.
    amps: tuple[str, ...] = ()
    refuses_amp: dict[str, str] | None = None
    # Why lrcheck cannot load one run's whole state (parameters, optimizer) into another before
    # each of its updates, for lockstep (``plan.judging``); None where it can.
    no_lockstep: str | None = OWN_LOOP

    @property
    def loads_state(self) -> bool:
        """lrcheck loads a run's whole state into it before each update: its effects can be
        judged in lockstep (``plan.judging.judging_mode``)."""
        return self.no_lockstep is None


# Transformers' lr_scheduler_type for each of lrcheck's built-in schedules it has.
TRAINER_SCHEDULES = {"constant": "constant_with_warmup", "linear": "linear", "cosine": "cosine"}

# Ludwig's learning_rate_scheduler.decay for each of lrcheck's built-in schedules it has; the
# warmup is its warmup_fraction. Its cosine is CosineAnnealingWarmRestarts with T_0 one checkpoint
# interval (an epoch by default): it restarts every epoch (ludwig/modules/lr_scheduler.py).
LUDWIG_SCHEDULES = {"constant": "none", "linear": "linear", "cosine": "cosine",
                    "exponential": "exponential"}

# Why --framework deepspeed refuses float64: its gradient reduction allows only the accelerator's
# supported types (deepspeed/runtime/engine.py, split_half_float_double_sparse).
DEEPSPEED_FLOAT64 = ("DeepSpeed reduces only the accelerator's supported gradient types "
                     "(engine.py split_half_float_double_sparse: \"attempting to reduce an "
                     "unsupported grad type: torch.float64\"); add --dtype float32")

# Why --framework deepspeed refuses --amp fp16: on the CPU its accelerator says so at
# deepspeed.initialize (engine.py _do_sanity_check), and on an accelerator its loss scaler skips
# steps that lrcheck does not record for it.
DEEPSPEED_FP16 = ("DeepSpeed's fp16 needs an accelerator that has it (on the CPU, engine.py: "
                  "\"Type fp16 is not supported on your device\"), and lrcheck does not record "
                  "its loss scaler's skipped steps; use --amp bf16")
# Why FSDP cannot: lrcheck's loop, but the model is in shards.
FSDP_SHARDS = ("FSDP shards the model: lrcheck does not load the reference's whole state into "
               "the shards before each update")
# Why lrcheck's own loop refuses --amp bf16.
PLAIN_BF16 = ("lrcheck's own loop autocasts float16 only (--amp fp16); --amp bf16 is "
              "DeepSpeed's bf16.enabled (--framework deepspeed)")

_FRAMEWORKS = [
    Framework(PLAIN, "lrcheck's own loop: exact, --policy says when the schedule steps",
              settings=("--policy", "--tail", "--loss-norm", "--amp", "--resume-at"),
              amps=("fp16",), refuses_amp={"bf16": PLAIN_BF16}, no_lockstep=None),
    Framework("accelerate", "HF Accelerate, run for real: prepare, accumulate, backward; "
              "lrcheck's loss normalisation", module="accelerate", lengths_times_world=True,
              settings=("--tail", "--loss-norm")),
    Framework("transformers", "the Transformers Trainer, run for real: its loop, loss scaling, "
              "last window and schedule (lr_scheduler_type)", module="transformers",
              owns_epoch=True, schedulers=TRAINER_SCHEDULES),
    Framework("lightning", "PyTorch Lightning, run for real: Trainer.fit with "
              "accumulate_grad_batches; schedule sized by estimated_stepping_batches",
              module="lightning", owns_epoch=True),
    Framework("ludwig", "Ludwig (ECD), run for real: LudwigModel.train with "
              "gradient_accumulation_steps, its own model, data order and learning_rate_scheduler; "
              "float32; --resume-at through its model_resume_path", module="ludwig",
              owns_epoch=True, schedulers=LUDWIG_SCHEDULES, settings=("--resume-at",),
              dtype="float32", single_process=True, own_model=True, resumes=True),
    Framework("fsdp", "lrcheck's own loop with the model sharded by PyTorch FSDP2 (fully_shard) "
              "instead of DDP; parameters gathered whole", own_loop=True,
              settings=("--policy", "--tail", "--loss-norm"),
              no_lockstep=FSDP_SHARDS),
    Framework("deepspeed", "DeepSpeed, run for real: deepspeed.initialize with lrcheck's model, "
              "optimizer and schedule, engine.backward and engine.step on every micro-batch; "
              "the engine owns the boundary, loss scaling and scheduler; float32, --amp bf16",
              module="deepspeed", owns_epoch=True,
              settings=("--amp",),
              refuses_dtype={"float64": DEEPSPEED_FLOAT64},
              amps=("bf16",), refuses_amp={"fp16": DEEPSPEED_FP16}),
]

FRAMEWORKS: dict[str, Framework] = {f.name: f for f in _FRAMEWORKS}


def require_framework(name: str) -> dict[str, str]:
    """``{module: version}`` of what framework ``name`` trains through (``{}`` for ``plain``);
    a ``SpecError`` naming the install command when it is not installed."""
    module = FRAMEWORKS[name].module
    if module is None:
        return {}
    try:
        found = importlib.import_module(module)
    except ImportError:
        raise SpecError(f"--framework {name} trains through {module}, which is not installed; "
                        f"install it with: pip install 'lrcheck[{module}]'") from None
    return {module: str(found.__version__)}
