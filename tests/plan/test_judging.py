"""How a pair's effects are judged, and the order its runs train in, decided once from the
framework registry (``plan.judging``), without torch."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, replace

import pytest

from lrcheck.plan.frameworks import FRAMEWORKS, FSDP_SHARDS, OWN_LOOP, PLAIN
from lrcheck.plan.judging import (
    CANDIDATE,
    REFERENCE,
    TWIN,
    Judging,
    Step,
    Where,
    judging_mode,
    keeps_states,
    lockstep_reason,
    run_order,
)

LOCKSTEP, AGAINST_TWIN, TOLERANCE = Judging.LOCKSTEP, Judging.TWIN, Judging.TOLERANCE

# Every registered framework against itself: with the noise floor, and with --fast. A framework
# added to the registry must be added here, with how its effects are judged.
JUDGED = {
    "plain": (LOCKSTEP, LOCKSTEP),
    "accelerate": (AGAINST_TWIN, TOLERANCE),
    "transformers": (AGAINST_TWIN, TOLERANCE),
    "lightning": (AGAINST_TWIN, TOLERANCE),
    "ludwig": (TOLERANCE, TOLERANCE),  # its own model and data order: no twin
    "fsdp": (AGAINST_TWIN, TOLERANCE),
    "deepspeed": (AGAINST_TWIN, TOLERANCE),
}


@dataclass(frozen=True)
class Run:
    """What ``plan.judging`` reads of a ``RunSpec``."""

    framework: str = PLAIN
    task: str = "digits"
    seed: int = 0
    dtype: str = "float64"
    optimizer: str = "sgd"
    samples: int | None = None
    world: int = 1


def test_every_registered_framework_has_its_judging_mode():
    assert set(JUDGED) == set(FRAMEWORKS)
    for name, (floor, fast) in JUDGED.items():
        run = Run(framework=name)
        assert judging_mode(run, run) is floor, name
        assert judging_mode(run, run, noise_floor=False) is fast, name


def test_the_mode_comes_from_the_registry_flags_not_the_names():
    for name, framework in FRAMEWORKS.items():
        run = Run(framework=name)
        expected = (LOCKSTEP if framework.loads_state
                    else TOLERANCE if framework.own_model else AGAINST_TWIN)
        assert judging_mode(run, run) is expected
        assert keeps_states(run) is framework.loads_state


def test_lockstep_needs_both_runs_in_lrchecks_unsharded_loop_with_the_same_state():
    plain = Run()
    assert lockstep_reason(plain, plain) is None
    assert lockstep_reason(plain, Run(framework="transformers")) == OWN_LOOP
    assert lockstep_reason(Run(framework="lightning"), plain) == OWN_LOOP
    assert lockstep_reason(plain, Run(framework="fsdp")) == FSDP_SHARDS
    assert lockstep_reason(Run(framework="transformers"), Run(framework="fsdp")) == FSDP_SHARDS
    for name, value in (("dtype", "float32"), ("optimizer", "adamw"), ("seed", 1),
                        ("task", "wine"), ("samples", 500)):
        other = replace(plain, **{name: value})
        assert f"differ in {name}" in (lockstep_reason(plain, other) or "")
        assert judging_mode(plain, other) is AGAINST_TWIN
    # A framework against lrcheck's own loop (--ref-framework plain) has a twin of the reference.
    assert judging_mode(plain, Run(framework="accelerate")) is AGAINST_TWIN
    assert judging_mode(Run(framework="transformers"), plain) is AGAINST_TWIN


def _roles(order):
    return [step.role for step in order.steps]


def test_the_reference_trains_first_keeping_its_states_then_the_candidate_in_lockstep():
    order = run_order(Run(), Run())
    assert (order.judging, order.where) == (LOCKSTEP, Where.HERE)
    assert order.steps == (Step(REFERENCE, keep_states=True), Step(CANDIDATE, lockstep=True))
    assert order.in_job == order.steps


def test_a_framework_pair_is_trained_free_then_its_twin_only_where_needed():
    run = Run(framework="transformers")
    order = run_order(run, run)
    assert order.steps == (Step(REFERENCE), Step(CANDIDATE), Step(TWIN, if_needed=True))
    assert run_order(run, run, noise_floor=False).steps == (Step(REFERENCE), Step(CANDIDATE))
    ludwig = Run(framework="ludwig")
    assert _roles(run_order(ludwig, ludwig)) == [REFERENCE, CANDIDATE]
    # lrcheck's own reference keeps its states for any candidate a suite hands it to.
    assert run_order(Run(), run).step(REFERENCE) == Step(REFERENCE, keep_states=True)


def test_in_one_torchrun_job_the_reference_trains_first_only_for_lockstep():
    order = run_order(Run(), Run(world=2))
    assert order.where is Where.ONE_JOB
    assert _roles(order) == [REFERENCE, CANDIDATE] and order.step(CANDIDATE).lockstep
    framework = Run(framework="accelerate")
    order = run_order(framework, replace(framework, world=2))
    assert order.where is Where.ONE_JOB
    assert _roles(order) == [CANDIDATE, REFERENCE, TWIN]  # as a bare torchrun script would
    assert [step.role for step in order.in_job] == [CANDIDATE, REFERENCE]  # the twin: after


def test_where_the_runs_train():
    assert run_order(Run(world=2), Run(world=2)).where is Where.HERE  # each launched alone
    assert run_order(Run(), Run(world=2), inside_torchrun=True).where is Where.IN_GROUP
    assert run_order(Run(), Run()).where is Where.HERE


def test_a_reference_already_trained_is_not_trained_again_except_inside_torchrun():
    assert _roles(run_order(Run(), Run(), reference_trained=True)) == [CANDIDATE]
    assert _roles(run_order(Run(), Run(world=2), reference_trained=True)) == [CANDIDATE]
    order = run_order(Run(), Run(world=2), inside_torchrun=True, reference_trained=True)
    assert _roles(order) == [REFERENCE, CANDIDATE]  # every rank follows the whole order


@pytest.mark.parametrize("step", [Step(REFERENCE, keep_states=True),
                                  Step(CANDIDATE, lockstep=True), Step(TWIN, if_needed=True)])
def test_a_step_goes_to_a_launched_job_and_back(step):
    assert Step.from_dict(step.to_dict()) == step


def test_judging_imports_no_torch_and_no_numpy():
    """Blocked in a fresh interpreter, torch and numpy cannot be imported: judging every
    registered framework and ordering its runs still works."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'numpy'):\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from dataclasses import dataclass\n"
        "from lrcheck.plan.frameworks import FRAMEWORKS\n"
        "from lrcheck.plan.judging import judging_mode, run_order\n"
        "@dataclass(frozen=True)\n"
        "class Run:\n"
        "    framework: str\n"
        "    task: str = 'digits'\n"
        "    seed: int = 0\n"
        "    dtype: str = 'float64'\n"
        "    optimizer: str = 'sgd'\n"
        "    samples: int = 0\n"
        "    world: int = 1\n"
        "for name in FRAMEWORKS:\n"
        "    run = Run(name)\n"
        "    print(name, judging_mode(run, run), len(run_order(run, run).steps))\n"
        "print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == "[]"
    assert lines[:-1] == [f"{name} {floor} {3 if floor is AGAINST_TWIN else 2}"
                          for name, (floor, _) in JUDGED.items()]


# Recorded runs (``lrcheck run``, ``diff``): how far lockstep judged, decided once.

def test_a_pair_recorded_apart_is_judged_free_running_and_says_why():
    from lrcheck.plan.judging import Recorded, recorded_judging

    judging = recorded_judging(None, free="recorded one after the other")
    assert judging.mode is Recorded.FREE and judging.free_from == 0
    assert judging.why == "recorded one after the other"
    sharded = recorded_judging([], "the parameters are sharded")  # lockstep never compared one
    assert sharded.mode is Recorded.FREE and sharded.why == "the parameters are sharded"
    assert sharded.lead(32) \
        == "judged in lockstep at no update; lockstep off: the parameters are sharded"


def test_lockstep_throughout_leaves_nothing_free_running():
    from lrcheck.plan.judging import Recorded, recorded_judging

    judging = recorded_judging(range(32))
    assert judging.mode is Recorded.LOCKSTEP and judging.through == 31
    assert judging.free_from is None and judging.why is None
    assert judging.lead(32) == "judged in lockstep at all 32 updates"


def test_lockstep_that_stopped_is_judged_in_part_and_free_running_after():
    from lrcheck.plan.judging import Recorded, recorded_judging

    judging = recorded_judging([0], "the optimizers' states differ")
    assert judging.mode is Recorded.PARTIAL and (judging.through, judging.free_from) == (0, 1)
    assert judging.lead(32) == ("judged in lockstep at 1 update of 32 (0 to 0); lockstep "
                                "stopped after update 0: the optimizers' states differ")
    assert recorded_judging([0, 1, 2], "gone").lead(12).startswith(
        "judged in lockstep at 3 updates of 12 (0 to 2)")



def test_a_resumed_candidate_is_judged_in_lockstep_up_to_its_resume_and_free_running_after():
    # The first process followed the reference up to update 22; the resume restored update
    # 19's checkpoint, so its later process (free) holds updates 20 on.
    from lrcheck.plan.judging import Recorded, recorded_judging

    judging = recorded_judging(range(23), resumed=20)
    assert judging.mode is Recorded.PARTIAL and (judging.through, judging.free_from) == (19, 20)
    assert judging.why == ("the candidate resumed in a later process at update 20, which runs "
                           "free (a later process does not follow the reference)")
    assert recorded_judging(range(20), resumed=20).through == 19  # resumed where it stopped
    early = recorded_judging([0, 1, 2], "the optimizers' states differ", resumed=20)
    assert (early.through, early.why) == (2, "the optimizers' states differ")  # its own cause
    assert recorded_judging(range(23), resumed=None).mode is Recorded.LOCKSTEP
    assert recorded_judging([5, 6], resumed=3).mode is Recorded.FREE

def _calls_of(name: str) -> dict[str, int]:
    """Per lrcheck module, how many calls of ``name`` (by name or attribute) its source holds
    (read with ``ast``, nothing imported)."""
    import ast

    from tests.test_imports import _modules, parse

    found = {}
    for module, path in _modules().items():
        calls = [node for node in ast.walk(parse(path.read_text(encoding="utf-8")))
                 if isinstance(node, ast.Call) and name in (getattr(node.func, "id", None),
                                                            getattr(node.func, "attr", None))]
        if calls:
            found[module] = len(calls)
    return found


def test_a_recorded_pairs_mode_is_decided_by_recorded_judging_alone():
    # Only plan.judging makes a RecordedJudging (stepwise's is the default: free, nothing
    # recorded), and only record.sides.read_judging asks it, from the candidate's lockstep file:
    # nothing else decides lockstep, in part or free for a recorded pair.
    assert set(_calls_of("RecordedJudging")) == {"lrcheck.plan.judging", "lrcheck.stepwise"}
    assert _calls_of("recorded_judging") == {"lrcheck.record.sides": 2}
    assert set(_calls_of("read_judging")) == {"lrcheck.record.sides", "lrcheck.command_pair"}
