"""Runs both sides of a pair and returns their traces. Each side runs in this process (world 1)
or is launched through torchrun (world > 1) — or, when lrcheck itself runs inside torchrun, on
the ranks of the process group this process belongs to (``join_torchrun``). This module alone
chooses among those paths."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from lrcheck.environment import Environment
from lrcheck.errors import Interrupted, RunError, SpecError, stop_words
from lrcheck.plan.frameworks import require_framework
from lrcheck.runner.dist.torchrun import torchrun_env
from lrcheck.spec import PairSpec, RunSpec
from lrcheck.trace import OnUpdate, RunTrace, UpdateRecord

if TYPE_CHECKING:
    from lrcheck.runner.dist.group import Member
    from lrcheck.runner.lockstep import Lockstep

Progress = Callable[[str, int, int], None]
ROLES = ("reference", "candidate")
TWIN = "twin"  # the reference's noise-floor twin (``twin_of``)
IN_JOB = "rank 0 of the candidate's torchrun job"


@dataclass
class PairTraces:
    """Both runs' traces and, where the pair's effects are judged against the noise floor, the
    reference's twin's (``twin_of``)."""

    reference: RunTrace
    candidate: RunTrace
    environment: Environment
    twin: RunTrace | None = None


class _Tracker:
    """What each run has recorded so far: for the progress bar, and for the result of a
    comparison interrupted half-way."""

    def __init__(self, pair: PairSpec, progress: Progress | None) -> None:
        self.pair, self.progress = pair, progress
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
                                  self.environment, reason)
        return Interrupted(reason, result, how=stop_words(stop))


# What two runs must share for one's state to be loaded into the other: the same model and
# optimizer, built the same way, in the same dtype.
SAME = ("task", "seed", "dtype", "optimizer", "samples")


def lockstep_reason(pair: PairSpec) -> str | None:
    """Why the pair's candidate cannot run in lockstep with its reference, or None when it can:
    both in lrcheck's own loop, with the same model, optimizer and dtype. (A GradScaler stays
    each run's own: its skipped steps are checked exactly, by ``skipped-steps``.)"""
    ref, cand = pair.reference, pair.candidate
    if "fsdp" in (ref.framework, cand.framework):
        return ("FSDP shards the model: lrcheck does not load the reference's whole state into "
                "the shards before each update")
    if (ref.framework, cand.framework) != ("plain", "plain"):
        return "a framework's own loop trains a run: lrcheck cannot set its state per update"
    for name in SAME:
        if getattr(ref, name) != getattr(cand, name):
            return f"the runs differ in {name}: one's state does not fit the other"
    return None


def twin_of(pair: PairSpec) -> RunSpec | None:
    """The reference's noise-floor twin — the same run with each update's samples fed in
    reverse order and its initial weights one unit in the last place higher, which differs from
    it by rounding alone — where the pair's parameters and loss are judged against the
    training's own noise: the candidate cannot run in lockstep, ``--fast`` was not asked, and
    lrcheck feeds the framework its data."""
    if not pair.noise_floor or lockstep_reason(pair) is None:
        return None
    from lrcheck.plan.frameworks import FRAMEWORKS

    if FRAMEWORKS[pair.reference.framework].own_model:
        return None  # it orders the data itself (Ludwig)
    return pair.reference.replace(twin=True)


def _floor_note(twin: RunTrace) -> str:
    """What ``result.json``'s environment says of a twin trained for the noise floor."""
    return (f"a twin of the reference (its samples summed in reverse order, its initial weights "
            f"one ulp apart) trained for the noise floor in {twin.seconds:.1f} s")


def lockstep_of(pair: PairSpec, reference: RunTrace) -> Lockstep | None:
    """The reference's states for its candidate to run in lockstep with, when it can."""
    if lockstep_reason(pair) is not None:
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
    from lrcheck.runner.dist.group import join

    return join(env, spec.device, timeout)


def release_torchrun(member: Member, error: BaseException) -> BaseException:
    """Leave the process group after ``error``, without waiting for the other ranks; returns
    the error to raise: ``error``, or on rank 0, when it only lost its peers, one naming the
    rank that failed and its node (``dist.notes``)."""
    from lrcheck.runner.dist.group import release

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
    from lrcheck.runner.dist.group import finish

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
    """The reference, then the candidate, each from scratch — or, for a multi-process candidate
    with a single-process reference, one torchrun job whose rank 0 trains the reference (first,
    when the candidate runs in lockstep with it; else after the candidate). With ``cache``, a
    reference already trained (the same frozen ``RunSpec``) is taken from it and a new one is
    added as soon as it has trained (one trained on rank 0 of the candidate's torchrun job: when
    the job ends; a noise-floor twin too).

    ``timeout``: the longest a multi-process run may go without finishing an update (start-up
    included). ``member`` (``join_torchrun``): lrcheck runs inside torchrun; the candidate runs
    on every rank, the reference on rank 0 (or on every rank when it has the same world), and
    only rank 0 gets the traces — the others get None. Ctrl-C raises ``Interrupted`` carrying
    what was recorded. Where ``needs_floor(reference, candidate)`` says so, the reference's
    noise-floor twin (``twin_of``) is trained after them.
    """
    tracker = _Tracker(pair, progress)
    try:
        traces = _run_pair(pair, tracker, timeout, member, cache, needs_floor)
    except KeyboardInterrupt as stop:  # Ctrl-C, or a signal that lrcheck.cli turns into one
        raise tracker.interrupted(stop) from None
    if traces is None:
        return None
    assert tracker.environment is not None  # stated before anything trained
    environment = replace(tracker.environment,
                          launch={role: _how(traces[role], member) for role in ROLES})
    return PairTraces(traces["reference"], traces["candidate"], environment, traces.get(TWIN))


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


def preflight(spec: RunSpec, *others: RunSpec) -> tuple[str, Environment]:
    """Bad input, told before anything trains: each run's plan against its data (the length of
    the run, a resume point, injected overflows), ``spec``'s device and the extra its policy
    needs. Returns the device and the environment a report states."""
    from lrcheck.experiments.tasks import load_data
    from lrcheck.runner.device import resolve_device
    from lrcheck.runner.local import environment
    from lrcheck.runner.preflight import check_memory, check_plan

    for run in (spec, *others):  # the candidate's first: its flags are the ones typed
        check_plan(run, len(load_data(run.task, run.seed, run.samples).y_train))
    # A reference of lrcheck's own loop also keeps its optimizer's state (runner.lockstep).
    check_memory([(run, load_data(run.task, run.seed, run.samples),
                   run is not spec and run.framework == "plain") for run in (spec, *others)])
    device = resolve_device(spec.device)
    frameworks: dict[str, str] = {}
    for run in (*others, spec):  # a missing extra is bad input: say so now
        frameworks.update(require_framework(run.framework))
    return device, replace(environment(device, spec.world), frameworks=frameworks)


def _run_pair(pair: PairSpec, tracker: _Tracker, timeout: float | None, member: Member | None,
              cache: dict[RunSpec, RunTrace] | None,
              needs_floor: NeedsFloor | None) -> dict[str, RunTrace] | None:
    ref, cand = pair.reference, pair.candidate
    cached = cache.get(ref) if cache is not None else None
    traces = {} if cached is None else {"reference": tracker.done("reference", cached)}
    if member is None and cand.world > 1 and ref.world == 1:
        traces.update(_launch_pair(pair, tracker, timeout, cached))
    else:
        device, tracker.environment = preflight(cand, ref)
        if member is not None:
            return _run_in_group(pair, member, tracker, needs_floor)
        if "reference" not in traces:
            traces["reference"] = tracker.done("reference", _run_here(
                ref, "reference", device, tracker, timeout))
            if cache is not None:  # at once: a suite's other workers wait for it
                cache[ref] = traces["reference"]
        traces["candidate"] = tracker.done("candidate", _run_here(
            cand, "candidate", device, tracker, timeout,
            lockstep_of(pair, traces["reference"])))
    twin = twin_of(pair)
    if twin is not None and needs_floor is not None and needs_floor(traces["reference"],
                                                                    traces["candidate"]):
        # Trained here, after the pair, wherever the reference trained.
        found = cache.get(twin) if cache is not None else None
        if found is None:
            device, _ = preflight(twin)
            found = _run_here(twin, TWIN, device, tracker, timeout)
        traces[TWIN] = tracker.done(TWIN, found)
        tracker.floor(found)
        if cache is not None:
            cache[twin] = found
    if cache is not None:
        cache[ref] = traces["reference"]
    return traces


def _launch_pair(pair: PairSpec, tracker: _Tracker, timeout: float | None,
                 cached: RunTrace | None) -> dict[str, RunTrace]:
    """A multi-process candidate and its single-process reference, in one torchrun job: the
    ranks check the plan and train the candidate, and rank 0 trains the reference — before the
    candidate when that runs in lockstep with it, else after it, as a bare torchrun script
    would. This process imports neither torch nor the data, so its own work does not compete
    with the ranks for the machine's cores. A ``cached`` reference is not trained again (its
    states go to the ranks in the job's folder)."""
    from lrcheck.runner.dist.launch import start

    train_reference = cached is None
    job = start(pair.candidate, "candidate",
                reference=pair.reference if train_reference else None,
                reference_first=lockstep_reason(pair) is None,
                on_update={role: tracker.hook(role) for role in ROLES},
                lockstep=None if cached is None else lockstep_of(pair, cached))
    try:
        job.wait(timeout)
    finally:  # also what an interrupted job finished, for its incomplete result
        tracker.environment = job.environment
        for role, trace in job.finished.items():
            tracker.done(role, trace)
    if train_reference:
        job.finished["reference"].launch = IN_JOB
    return job.finished


def _run_here(spec: RunSpec, role: str, device: str, tracker: _Tracker,
              timeout: float | None, lockstep: Lockstep | None = None) -> RunTrace:
    if spec.world == 1:
        from lrcheck.runner.local import run_local

        return run_local(spec, role, device=device, on_update=tracker.hook(role),
                         lockstep=lockstep)
    from lrcheck.runner.dist.launch import check_gpus, launch

    check_gpus(spec, device)
    return launch(spec, role, timeout=timeout, on_update=tracker.hook(role), lockstep=lockstep)


def _run_in_group(pair: PairSpec, member: Member, tracker: _Tracker,
                  needs_floor: NeedsFloor | None) -> dict[str, RunTrace] | None:
    from lrcheck.runner.local import run_local

    ref, cand = pair.reference, pair.candidate
    if cand.world != member.world or ref.world not in (1, member.world):
        raise SpecError(f"inside torchrun (world {member.world}) the candidate needs world "
                        f"{member.world} and the reference world 1 or {member.world}; got "
                        f"{cand.world} and {ref.world}")
    traces: dict[str, RunTrace] = {}
    in_step = lockstep_reason(pair) is None
    lockstep = None
    if ref.world == 1:
        # Rank 0 trains the reference alone; the others wait on the default group, whose
        # collectives have no --timeout.
        if member.rank == 0:
            traces["reference"] = tracker.done("reference", run_local(
                ref, "reference", device=member.device, on_update=tracker.hook("reference")))
            lockstep = lockstep_of(pair, traces["reference"])
        member.barrier()
        if in_step:  # the reference's states, from rank 0 to every rank
            from lrcheck.runner.lockstep import broadcast

            lockstep = broadcast(lockstep, member.rank, member.device, member.group)
    else:
        traces["reference"] = tracker.done("reference", run_local(
            ref, "reference", device=member.device, rank=member.rank, group=member.group,
            on_update=tracker.hook("reference")))
        lockstep = lockstep_of(pair, traces["reference"])
    traces["candidate"] = tracker.done("candidate", run_local(
        cand, "candidate", device=member.device, rank=member.rank, group=member.group,
        on_update=tracker.hook("candidate"), lockstep=lockstep))
    twin = twin_of(pair)
    if twin is not None:  # rank 0 decides, as it holds both traces
        need = (member.rank == 0 and needs_floor is not None
                and needs_floor(traces["reference"], traces["candidate"]))
        twin = twin if member.share(int(need)) else None
    if twin is not None and twin.world == 1:
        if member.rank == 0:
            traces[TWIN] = tracker.done(TWIN, run_local(twin, TWIN, device=member.device,
                                                        on_update=tracker.hook(TWIN)))
        member.barrier()
    elif twin is not None:
        traces[TWIN] = tracker.done(TWIN, run_local(
            twin, TWIN, device=member.device, rank=member.rank, group=member.group,
            on_update=tracker.hook(TWIN)))
    if TWIN in traces:
        tracker.floor(traces[TWIN])
    return traces if member.rank == 0 else None
