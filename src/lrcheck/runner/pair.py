"""Runs both sides of a pair and returns their traces, in the order ``plan.judging.run_order``
computes (who trains first, who loads the reference's states, the twin): each side in this
process (world 1) or launched through torchrun (world > 1), both in one torchrun job (a
multi-process candidate's single-process reference on its rank 0: ``runner.rank``), or,
when lrcheck itself runs inside torchrun, on the ranks of the process group this process belongs
to (``join_torchrun``). This module executes the order here and inside torchrun, and hands it to
a launched job."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from lrcheck.environment import Environment
from lrcheck.errors import Interrupted, RunError, SpecError, stop_words
from lrcheck.plan.judging import (
    CANDIDATE,
    REFERENCE,
    ROLES,
    TWIN,
    Judging,
    RunOrder,
    Step,
    Where,
    keeps_states,
    run_order,
)
from lrcheck.runner.ranks.torchrun import torchrun_env
from lrcheck.spec import PairSpec, RunSpec
from lrcheck.trace import OnUpdate, RunTrace, UpdateRecord

if TYPE_CHECKING:
    from lrcheck.runner.lockstep import Lockstep
    from lrcheck.runner.ranks.group import Member

Progress = Callable[[str, int, int], None]
IN_JOB = "rank 0 of the candidate's torchrun job"


@dataclass
class PairTraces:
    """Both runs' traces, how the pair's effects are judged (``plan.judging.judging_mode``) and,
    where they are judged against the noise floor and needed it, the reference's twin's."""

    reference: RunTrace
    candidate: RunTrace
    environment: Environment
    judging: Judging | None = None  # None: a schedule stepped without a model (lrcheck trace)
    twin: RunTrace | None = None


class _Tracker:
    """What each run has recorded so far: for the progress bar, and for the result of a
    comparison interrupted half-way."""

    def __init__(self, pair: PairSpec, progress: Progress | None,
                 judging: Judging | None = None) -> None:
        self.pair, self.progress, self.judging = pair, progress, judging
        self.updates: dict[str, list[UpdateRecord]] = {role: [] for role in (*ROLES, TWIN)}
        self.planned = dict.fromkeys((*ROLES, TWIN), 0)
        self.finished: dict[str, RunTrace] = {}
        self.environment: Environment | None = None
        self.current: str | None = None  # the run the latest update came from

    def hook(self, role: str) -> OnUpdate:
        def on_update(record: UpdateRecord, total: int) -> None:
            self.updates[role].append(record)
            self.current = role
            self.planned[role] = total
            if self.progress is not None:
                self.progress(role, len(self.updates[role]), total)

        return on_update

    def floor(self, twin: RunTrace) -> None:
        """The environment says how the noise floor was measured: by ``twin``."""
        if self.environment is not None:
            self.environment = replace(self.environment, noise_floor=_floor_note(twin))

    def done(self, role: str, trace: RunTrace) -> RunTrace:
        self.finished[role] = trace
        return trace

    def interrupted(self, stop: BaseException) -> Interrupted:
        from lrcheck.result import IncompleteResult

        traces = {}
        for role in ROLES:
            if role in self.finished:
                traces[role] = self.finished[role]
                continue
            done, planned = len(self.updates[role]), self.planned[role]
            stopped = (f"interrupted after {done} of {planned} updates" if planned
                       else "interrupted before its first update")
            traces[role] = RunTrace.partial(getattr(self.pair, role), self.updates[role],
                                            planned, stopped)
        running = (self.current if self.current not in (None, *self.finished)
                   else next((r for r in ROLES if r not in self.finished), "report"))
        reason = (f"{stop_words(stop)} during the {running} run; "
                  f"reference {traces['reference'].stopped or 'finished'}, "
                  f"candidate {traces['candidate'].stopped or 'finished'}")
        result = IncompleteResult(self.pair, traces["reference"], traces["candidate"],
                                  self.environment, reason, self.judging)
        return Interrupted(reason, result, how=stop_words(stop))


def _floor_note(twin: RunTrace) -> str:
    """What ``result.json``'s environment says of a twin trained for the noise floor."""
    return (f"a twin of the reference (its samples summed in reverse order, its initial weights "
            f"one ulp apart) trained for the noise floor in {twin.seconds:.1f} s")


def _states(step: Step, reference: RunTrace | None) -> Lockstep | None:
    """The reference's states for ``step`` to run in lockstep with, where it does."""
    if not step.lockstep:
        return None
    from lrcheck.runner.lockstep import lockstep_from

    return lockstep_from(reference)


def join_torchrun(spec: RunSpec, timeout: float | None) -> Member | None:
    """When lrcheck itself runs inside torchrun with several processes (``torchrun
    --nproc-per-node N -m lrcheck compare``), join the process group of the candidate ``spec``
    and return this process's ``group.Member`` for ``run_pair`` and ``leave_torchrun``; else
    None (each side then trains here or is launched by ``run_pair``)."""
    env = torchrun_env(os.environ)
    if env is None or env.world == 1:
        return None
    from lrcheck.procs.determinism import set_environment
    from lrcheck.runner.ranks.group import join

    if spec.deterministic:  # before the process group, and NCCL, start
        set_environment()

    return join(env, spec.device, timeout)


def release_torchrun(member: Member, error: BaseException) -> BaseException:
    """Leave the process group after ``error``, without waiting for the other ranks; returns
    the error to raise: ``error``, or on rank 0, when it only lost its peers, one naming the
    rank that failed and its node (``ranks.notes``)."""
    from lrcheck.runner.ranks.group import release

    try:
        if isinstance(error, RunError) and member.notes is not None:
            member.notes.failed(str(error))
            error = member.notes.blame(error)
    finally:
        release(member)
    return error


def leave_torchrun(member: Member, code: int, before_leaving: Callable[[], None]) -> int:
    """Rank 0's exit ``code`` on every rank; then ``before_leaving()`` (where rank 0 saves and
    shows the report, and stops its plot helper), then, also when that raised, wait for every
    rank and leave the group. torchrun stops every rank as soon as one exits non-zero: the
    others wait for rank 0 in that last barrier (stopped by torchrun, rank 0 would leave its plot
    helper to init)."""
    from lrcheck.runner.ranks.group import finish

    code = member.share(code)
    try:
        before_leaving()
    finally:
        finish(member)
    return code


# Whether two traces' effects need the noise floor to be judged (``checks.needs_floor``): the
# twin is trained only then.
NeedsFloor = Callable[[RunTrace, RunTrace], bool]


def run_pair(pair: PairSpec, progress: Progress | None = None, *, timeout: float | None = None,
             member: Member | None = None, cache: dict[RunSpec, RunTrace] | None = None,
             needs_floor: NeedsFloor | None = None) -> PairTraces | None:
    """The pair's runs in the order ``plan.judging.run_order`` gives, where it says: here (each
    run in this process, or launched through torchrun), in one torchrun job whose rank 0 trains
    the single-process reference, or — ``member`` (``join_torchrun``): lrcheck runs inside
    torchrun — on the ranks of this process group, where the candidate runs on every rank, the
    reference on rank 0 (or on every rank when it has the same world), and only rank 0 gets the
    traces (the others get None). With ``cache``, a reference already trained (the same frozen
    ``RunSpec``) is taken from it and a new one is added as soon as it has trained (one trained
    on rank 0 of the candidate's torchrun job: when the job ends; a noise-floor twin too).

    ``timeout``: the longest a multi-process run may go without finishing an update (start-up
    included). Ctrl-C raises ``Interrupted`` carrying what was recorded. Where the order has a
    twin, it trains after the pair only where ``needs_floor(reference, candidate)`` says so.
    """
    cached = cache.get(pair.reference) if cache is not None else None
    order = run_order(pair.reference, pair.candidate, pair.noise_floor,
                      inside_torchrun=member is not None, reference_trained=cached is not None)
    tracker = _Tracker(pair, progress, order.judging)
    try:
        if member is not None:
            traces = _run_in_group(pair, order, member, tracker, needs_floor)
        else:
            traces = _run_pair(pair, order, tracker, timeout, cache, cached, needs_floor)
    except KeyboardInterrupt as stop:  # Ctrl-C, or a signal that lrcheck.cli turns into one
        raise tracker.interrupted(stop) from None
    if traces is None:
        return None
    assert tracker.environment is not None  # stated before anything trained
    environment = replace(tracker.environment,
                          launch={role: _how(traces[role], member) for role in ROLES})
    return PairTraces(traces[REFERENCE], traces[CANDIDATE], environment, order.judging,
                      twin=traces.get(TWIN))


def _how(trace: RunTrace, member: Member | None) -> str:
    """Where a run trained (a reference from the cache: where it trained the first time)."""
    spec = trace.spec
    assert spec is not None  # a run lrcheck trained
    if trace.launch is not None:
        return trace.launch
    if member is not None:
        nodes = f" on {member.env.nodes} nodes" if member.env.nodes > 1 else ""
        return (f"inside torchrun, {spec.world} processes{nodes}" if spec.world > 1
                else "inside torchrun, rank 0 alone")
    if spec.world > 1:
        return f"launched through torchrun, {spec.world} processes"
    return "in-process"


def _spec(pair: PairSpec, step: Step) -> RunSpec:
    """What ``step`` trains: the candidate, the reference, or the reference's twin (its samples
    fed in reverse order, its initial weights one ulp higher: ``RunSpec.twin``)."""
    if step.role == CANDIDATE:
        return pair.candidate
    return pair.reference.replace(twin=True) if step.role == TWIN else pair.reference


def _pair_preflight(pair: PairSpec, order: RunOrder) -> tuple[str, Environment]:
    """``runner.preflight.preflight`` of the pair's candidate and reference, each with its step
    of ``order`` (the reference's: what it keeps, for the memory estimate; a cached one is
    checked too, and held with what it kept)."""
    from lrcheck.runner.preflight import preflight

    ref = order.step(REFERENCE) or Step(REFERENCE, keep_states=keeps_states(pair.reference))
    return preflight([(pair.candidate, order.step(CANDIDATE) or Step(CANDIDATE)),
                      (pair.reference, ref)])


def _run_pair(pair: PairSpec, order: RunOrder, tracker: _Tracker, timeout: float | None,
              cache: dict[RunSpec, RunTrace] | None, cached: RunTrace | None,
              needs_floor: NeedsFloor | None) -> dict[str, RunTrace]:
    """``order`` here, or in the candidate's torchrun job (``Where.ONE_JOB``); the twin, where
    needed, after the pair, where the reference trained."""
    traces = {} if cached is None else {REFERENCE: tracker.done(REFERENCE, cached)}
    device = ""
    if order.where is Where.ONE_JOB:
        traces.update(_launch_pair(pair, order, tracker, timeout, cached))
    else:
        device, tracker.environment = _pair_preflight(pair, order)
    for step in order.steps:
        if step.role in traces:  # trained in the job, or cached
            continue
        if step.if_needed and not (needs_floor is not None
                                   and needs_floor(traces[REFERENCE], traces[CANDIDATE])):
            continue
        spec = _spec(pair, step)
        found = cache.get(spec) if cache is not None and step.role == TWIN else None
        if found is None:
            if step.role == TWIN:
                from lrcheck.runner.preflight import preflight

                device, _ = preflight([(spec, step)])
            found = _run_here(spec, step, device, tracker, timeout,
                              _states(step, traces.get(REFERENCE)))
        traces[step.role] = tracker.done(step.role, found)
        if step.role == TWIN:
            tracker.floor(found)
        if cache is not None and step.role != CANDIDATE:  # at once: a suite's other workers
            cache[spec] = found                           # wait for it
    if cache is not None:
        cache[pair.reference] = traces[REFERENCE]
    return traces


def _launch_pair(pair: PairSpec, order: RunOrder, tracker: _Tracker, timeout: float | None,
                 cached: RunTrace | None) -> dict[str, RunTrace]:
    """A multi-process candidate and its single-process reference, in one torchrun job
    (``runner.rank``): the ranks check the plan and train the candidate, and rank 0
    trains the reference, in ``order``. This process imports neither torch nor the data, so its
    own work does not compete with the ranks for the machine's cores. A ``cached`` reference is
    not trained again (its states go to the ranks in the job's folder)."""
    from lrcheck.runner.ranks.launch import start

    train_reference = order.step(REFERENCE) is not None
    candidate = order.step(CANDIDATE)
    assert candidate is not None
    job = start(pair.candidate, CANDIDATE, reference=pair.reference if train_reference else None,
                order=order.in_job, on_update={role: tracker.hook(role) for role in ROLES},
                lockstep=None if cached is None else _states(candidate, cached))
    try:
        job.wait(timeout)
    finally:  # also what an interrupted job finished, for its incomplete result
        tracker.environment = job.environment
        for role, trace in job.finished.items():
            tracker.done(role, trace)
    if train_reference:
        job.finished[REFERENCE].launch = IN_JOB
    return job.finished


def _run_here(spec: RunSpec, step: Step, device: str, tracker: _Tracker,
              timeout: float | None, lockstep: Lockstep | None = None) -> RunTrace:
    if spec.world == 1:
        from lrcheck.runner.local import run_local

        return run_local(spec, step.role, device=device, on_update=tracker.hook(step.role),
                         lockstep=lockstep, keep_states=step.keep_states)
    from lrcheck.runner.ranks.launch import check_gpus, launch

    check_gpus(spec, device)
    return launch(spec, step, timeout=timeout, on_update=tracker.hook(step.role),
                  lockstep=lockstep)


def _run_in_group(pair: PairSpec, order: RunOrder, member: Member, tracker: _Tracker,
                  needs_floor: NeedsFloor | None) -> dict[str, RunTrace] | None:
    """``order`` on the ranks of ``member``'s process group: a single-process run on rank 0 while
    the others wait on the default group (whose collectives have no --timeout), a run of the
    group's world on every rank; the reference's states go from rank 0 to every rank by
    broadcast; rank 0 decides whether the twin is needed, as it holds both traces."""
    ref, cand = pair.reference, pair.candidate
    if cand.world != member.world or ref.world not in (1, member.world):
        raise SpecError(f"inside torchrun (world {member.world}) the candidate needs world "
                        f"{member.world} and the reference world 1 or {member.world}; got "
                        f"{cand.world} and {ref.world}")
    _, tracker.environment = _pair_preflight(pair, order)  # each rank trains on member.device
    traces: dict[str, RunTrace] = {}
    for step in order.steps:
        if step.if_needed:
            need = (member.rank == 0 and needs_floor is not None
                    and needs_floor(traces[REFERENCE], traces[CANDIDATE]))
            if not member.share(int(need)):
                continue
        lockstep = _states(step, traces.get(REFERENCE))
        if step.lockstep and ref.world == 1:  # the reference's states, from rank 0 to every rank
            from lrcheck.runner.lockstep import broadcast

            lockstep = broadcast(lockstep, member.rank, member.device, member.group)
        trace = _run_on_ranks(_spec(pair, step), step, member, tracker, lockstep)
        if trace is not None:
            traces[step.role] = tracker.done(step.role, trace)
    if TWIN in traces:
        tracker.floor(traces[TWIN])
    return traces if member.rank == 0 else None


def _run_on_ranks(spec: RunSpec, step: Step, member: Member, tracker: _Tracker,
                  lockstep: Lockstep | None) -> RunTrace | None:
    """``spec`` on every rank of the group, or, for a single-process run, on rank 0 alone while
    the others wait (None on them)."""
    from lrcheck.runner.local import run_local

    hook = tracker.hook(step.role)
    if spec.world > 1:
        return run_local(spec, step.role, device=member.device, rank=member.rank,
                         group=member.group, on_update=hook, lockstep=lockstep,
                         keep_states=step.keep_states)
    trace = (run_local(spec, step.role, device=member.device, on_update=hook, lockstep=lockstep,
                       keep_states=step.keep_states) if member.rank == 0 else None)
    member.barrier()
    return trace
