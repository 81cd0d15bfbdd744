"""Bad input that only a run's length or its recording can show, told before anything trains
(``pair.preflight``, ``simulate.simulate_pair``, the workers)."""

from __future__ import annotations

from lrcheck.errors import SpecError
from lrcheck.experiments.schedulers import check_warmup
from lrcheck.experiments.tasks import Dataset
from lrcheck.plan.steps import plan_steps, schedule_context
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
