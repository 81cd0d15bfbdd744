"""``lrcheck trace``: a run's schedule stepped without a model, for runs far too large to train.

The simulation uses the pieces the training loop uses — ``plan_steps``, ``schedule_context``,
the policy, ``make_scheduler`` and the loop's own optimizer — and calls ``scheduler.step()``
exactly where ``plain.train`` calls it, so the LR it records for update k is the one a real run
records. What it leaves out is all that cannot move the LR:

- no data, no model, no forward or backward: the optimizer holds one weight and one bias in the
  loop's two param groups, so a factory sees the optimizer shape and hyper-parameters it sees in a
  real run;
- the world size is arithmetic: every rank steps its own scheduler identically, so one rank is
  simulated, with ``ceil(samples / (bs·world))`` micro-batches per update;
- ``optimizer.step()`` runs once, at the first update, where the loop first calls it. torch only
  looks at it on a scheduler's first ``step()`` (to warn about calling them in the wrong order),
  and it does not touch the LR, so the warnings match a real run's and the remaining updates cost
  one ``scheduler.step()`` each, not an optimizer step as well;
- a policy that steps every micro-batch costs ``micro-batches - 1`` bare ``scheduler.step()``
  calls before the LR is read: nothing else runs per micro-batch.
"""

from __future__ import annotations

import functools
import operator
import time
from collections.abc import Callable

import numpy as np
import torch
from torch.optim.lr_scheduler import LRScheduler

from lrcheck.environment import Environment
from lrcheck.errors import Interrupted
from lrcheck.experiments.schedulers import make_scheduler
from lrcheck.plan.judging import ROLES
from lrcheck.plan.policies import POLICIES
from lrcheck.plan.steps import (
    ScheduleContext,
    StepPlan,
    plan_steps,
    schedule_context,
    update_counters,
    update_runs,
)
from lrcheck.runner.build import make_optimizer
from lrcheck.runner.local import environment, guarded
from lrcheck.runner.memory import check_fits
from lrcheck.runner.pair import PairTraces, Progress
from lrcheck.runner.preflight import check_plan
from lrcheck.runner.recording import step_failure
from lrcheck.runner.startup import release
from lrcheck.spec import PairSpec, RunSpec, samples_per_epoch
from lrcheck.trace import RunTrace, UpdateColumns, simulated_trace
from lrcheck.words import plural

# Called every PROGRESS_EVERY updates with the updates simulated so far and those planned (not
# trace.OnUpdate: no record is made per update).
OnSimulated = Callable[[int, int], None]
PROGRESS_EVERY = 4096
# Memory per update of one simulated run, at its peak (the LRs of the loop's two param groups as
# Python floats while the run is stepped, then as numpy columns with its counters; the checks,
# the plot and result.json). Measured with tracemalloc over 10^6 updates: 84 bytes.
TRACE_BYTES_PER_UPDATE = 100
WINDOW, READ, AFTER = "window", "read", "after"  # where in an update the simulation is


def _schedule(spec: RunSpec, num_samples: int | None
              ) -> tuple[StepPlan, ScheduleContext, torch.optim.Optimizer, LRScheduler]:
    """The plan, the schedule's context, an optimizer of one parameter and ``spec``'s
    scheduler on it, as ``plain.train`` builds them."""
    plan = plan_steps(samples_per_epoch(spec) if num_samples is None else num_samples, spec.bs,
                      spec.accum, spec.world, spec.epochs, spec.tail)
    ctx = schedule_context(plan, spec.policy, spec.warmup, spec.framework)
    optimizer = make_optimizer(spec, torch.nn.Linear(1, 1))
    release()  # everything imported (runner.startup)
    return plan, ctx, optimizer, make_scheduler(spec.scheduler, optimizer, ctx)


def simulate(spec: RunSpec, num_samples: int | None = None,
             on_update: OnSimulated | None = None) -> RunTrace:
    """Step ``spec``'s schedule over ``num_samples`` training samples per epoch (default
    ``samples_per_epoch(spec)``) as ``plain.train`` would, recording the LR of every update."""
    _load_optimizer_code()
    started = time.perf_counter()
    plan, ctx, optimizer, scheduler = _schedule(spec, num_samples)
    every_micro_batch = POLICIES[spec.policy].steps_every_micro_batch
    runs = update_runs(plan)

    # Only scheduler.step() runs per step; the counters of every update follow from the runs
    # (update_counters) and are not kept in the loop.
    groups, step, lr_of = optimizer.param_groups, scheduler.step, operator.itemgetter("lr")
    lrs: list[float] = []
    record = lrs.extend
    phase, first, stepped_in_window = WINDOW, True, 0
    stopped: str | None = None
    interrupted = False
    try:
        for run in runs:
            before_read = run.micro_batches - 1 if every_micro_batch else 0
            for chunk in range(0, run.count, PROGRESS_EVERY):
                for _ in range(min(PROGRESS_EVERY, run.count - chunk)):
                    phase = WINDOW
                    # the micro-batches before the last (the count is read if a step raises)
                    for stepped_in_window in range(before_read):  # noqa: B007
                        step()
                    phase = READ
                    record(map(lr_of, groups))  # the LR this update uses
                    if first:
                        optimizer.step()  # once; see the module docstring
                        first = False
                    phase = AFTER
                    step()
                if on_update is not None:
                    on_update(len(lrs) // len(groups), plan.total_updates)
    except Exception as exc:
        if phase == READ:
            raise
        made = len(lrs) // len(groups)
        # Inside the window the update is not made; after it, it was.
        stopped = step_failure(exc, made if phase == WINDOW else made - 1)
    except KeyboardInterrupt:
        interrupted = True
    made = len(lrs) // len(groups)
    del lrs[made * len(groups):]  # an update whose LRs were being read when Ctrl-C came
    counters = update_counters(runs, made, every_micro_batch)
    steps = counters.steps_made
    if stopped or interrupted:
        steps += stepped_in_window if phase == WINDOW else -1

    columns = UpdateColumns(np.fromiter(map(float, lrs), np.float64, len(lrs)).reshape(made, -1),
                            counters.samples_seen, counters.steps_at_read, counters.epoch)
    trace = simulated_trace(spec, columns, steps, planned_updates=plan.total_updates,
                            context=ctx, stopped=stopped,
                            seconds=time.perf_counter() - started)
    if interrupted:
        trace.stopped = f"interrupted after {made} of {plural(plan.total_updates, 'update')}"
        raise SimulationInterrupted(trace)
    return trace


class SimulationInterrupted(KeyboardInterrupt):
    """Ctrl-C during ``simulate``; ``trace`` holds the updates simulated until then."""

    def __init__(self, trace: RunTrace) -> None:
        super().__init__()
        self.trace = trace


@functools.cache
def _load_optimizer_code() -> None:
    """torch imports much of its optimizer machinery on the first ``optimizer.step()``
    (about a second); pay that once, outside the timed simulation."""
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1).step()


def simulate_one(spec: RunSpec, role: str, progress: Progress | None = None) -> RunTrace:
    """``simulate`` with torch's warnings kept in the trace, as ``local.run_local`` keeps them."""
    on_update = (lambda done, total: progress(role, done, total)) if progress else None
    return guarded(f"simulating the {role} schedule", lambda: simulate(spec, on_update=on_update))


def simulate_pair(pair: PairSpec, progress: Progress | None = None) -> PairTraces:
    """Both schedules of ``pair``, over ``samples`` training samples per epoch each, after the
    checks a training run makes before it starts (``preflight.check_plan``)."""
    for spec in (pair.candidate, pair.reference):  # the flags the user typed told first
        check_plan(spec, samples_per_epoch(spec))
    planned = {role: plan_steps(samples_per_epoch(spec), spec.bs, spec.accum, spec.world,
                                spec.epochs, spec.tail).total_updates
               for role, spec in (("reference", pair.reference), ("candidate", pair.candidate))}
    updates = sum(planned.values())
    check_fits(updates * TRACE_BYTES_PER_UPDATE,
               f"simulating {updates:,} updates (the LR of each, over both runs)",
               "lower --samples or --epochs")

    env = environment("none (schedule simulated, no model)", pair.candidate.world)
    done: dict[str, RunTrace] = {}
    try:
        for role in ROLES:
            done[role] = simulate_one(getattr(pair, role), role, progress)
    except KeyboardInterrupt as exc:
        raise _interrupted(pair, done, getattr(exc, "trace", None), planned, env) from None
    return PairTraces(done["reference"], done["candidate"], env)


def _interrupted(pair: PairSpec, done: dict[str, RunTrace], partial: RunTrace | None,
                 planned: dict[str, int], env: Environment) -> Interrupted:
    """``Interrupted`` carrying what the simulation had recorded when Ctrl-C came: the runs
    finished, the one in progress (``partial``), and the one not begun."""
    from lrcheck.result import IncompleteResult, Kind

    running = next(role for role in ROLES if role not in done)
    traces = dict(done)
    for role in ROLES:
        if role not in traces:
            traces[role] = partial if role == running and partial is not None else \
                RunTrace.partial(getattr(pair, role), [], planned[role],
                                 "interrupted before its first update")
    reason = (f"interrupted (Ctrl-C) while simulating the {running} schedule; "
              f"reference {traces['reference'].stopped or 'finished'}, "
              f"candidate {traces['candidate'].stopped or 'finished'}")
    return Interrupted(reason, IncompleteResult(pair, traces["reference"], traces["candidate"],
                                                env, reason, kind=Kind.TRACE))
