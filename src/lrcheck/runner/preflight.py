"""Bad input that only a run's length or its recording can show, told before anything trains
(``preflight``: ``runner.pair`` and the workers of a launched job; ``simulate.simulate_pair``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from lrcheck.environment import Environment
from lrcheck.errors import SpecError
from lrcheck.experiments.cache import load_data
from lrcheck.experiments.schedulers import check_warmup
from lrcheck.experiments.tasks import Dataset
from lrcheck.plan.frameworks import require_framework
from lrcheck.plan.judging import Step
from lrcheck.plan.steps import plan_steps, schedule_context
from lrcheck.procs.determinism import described_here
from lrcheck.runner.memory import check_fits
from lrcheck.runner.recording import recording_bytes
from lrcheck.runner.resume import resume_point
from lrcheck.spec import RunSpec
from lrcheck.words import plural


def check_plan(spec: RunSpec, num_samples: int) -> None:
    """What can only be checked against the run's length, checked before anything trains: a
    training set of at least one effective batch, a warmup the schedule has room for, a resume
    point inside the run, injected overflows at updates the run makes."""
    plan = plan_steps(num_samples, spec.bs, spec.accum, spec.world, spec.epochs, spec.tail)
    check_warmup(spec.scheduler, spec.warmup,
                 lambda warmup: schedule_context(plan, spec.policy, warmup, spec.framework))
    resume_point(spec, plan)
    late = [k for k in spec.inject_overflow if k >= plan.total_updates]
    if late:
        raise SpecError(f"--inject-overflow {','.join(map(str, late))}: the run has "
                        f"{plural(plan.total_updates, 'update')}; give updates "
                        f"0..{plan.total_updates - 1}")


def check_memory(runs: list[tuple[RunSpec, Dataset, bool]]) -> None:
    """Bad input when the recordings of ``runs`` (each with its data, and whether it keeps its
    optimizer's state too), which the checks hold together, need more memory than the machine
    has left."""
    check_fits(sum(recording_bytes(spec, data, states) for spec, data, states in runs),
               "recording the runs (a snapshot of every parameter after every update)",
               "lower --epochs, or --samples for a generated task")


def preflight(runs: Sequence[tuple[RunSpec, Step]]) -> tuple[str, Environment]:
    """Bad input, told before anything trains: each run's plan against its data (the length of
    the run, a resume point, injected overflows), the memory their recordings need together
    (each with what its step of the run order keeps: ``Step.keep_states``), the device of the
    first run (the candidate, whose flags are the ones typed) and the extras their frameworks
    need. Returns the device and the environment a report states (with ``--deterministic``,
    its settings as this process applies them, read back)."""
    from lrcheck.runner.device import resolve_device
    from lrcheck.runner.local import environment

    datasets = [load_data(spec.task, spec.seed, spec.samples) for spec, _ in runs]
    for (spec, _), data in zip(runs, datasets, strict=True):  # the candidate's first
        check_plan(spec, len(data.y_train))
    check_memory([(spec, data, step.keep_states)
                  for (spec, step), data in zip(runs, datasets, strict=True)])
    first = runs[0][0]
    device = resolve_device(first.device)
    frameworks: dict[str, str] = {}
    for spec, _ in (*runs[1:], runs[0]):  # a missing extra is bad input: say so now
        frameworks.update(require_framework(spec.framework))
    deterministic = described_here(device, first.world) if first.deterministic else None
    return device, replace(environment(device, first.world), frameworks=frameworks,
                           deterministic=deterministic)
