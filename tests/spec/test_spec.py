import pytest

from lrcheck.errors import SpecError
from lrcheck.spec import PairSpec, RunSpec, Tolerances


@pytest.mark.parametrize("changes,needle", [
    ({"accum": 0}, "--accum must be a whole number >= 1, got 0"),
    ({"bs": 0}, "--bs must be a whole number >= 1, got 0"),
    ({"task": "mnist"}, "--task 'mnist' is not known; choose one of: digits, digits-bn"),
    ({"scheduler": "cosin"}, "--scheduler 'cosin' is not known; choose one of: constant"),
    ({"policy": "sometimes"}, "--policy 'sometimes' is not known; choose one of: per-update"),
    ({"warmup": 1.0}, "--warmup must be a fraction of the run in [0, 1), got 1.0"),
    ({"warmup": -0.1}, "--warmup must be a fraction of the run in [0, 1), got -0.1"),
    ({"lr": 0.0}, "--lr must be a positive number"),
    ({"tail": "keep"}, "--tail 'keep' is not known; choose one of: drop, flush, carry"),
])
def test_bad_values_name_the_value_and_the_choices(changes, needle):
    with pytest.raises(SpecError) as info:
        RunSpec(**changes)
    assert needle in str(info.value)


def test_ref_bs_must_match_the_effective_batch_and_says_both_numbers():
    with pytest.raises(SpecError) as info:
        PairSpec.build(RunSpec(bs=16, accum=2), ref_bs=30)
    message = str(info.value)
    assert "30" in message and "32" in message and "set --ref-bs 32" in message


def test_reference_is_the_candidate_at_accum_1_per_update():
    pair = PairSpec.build(RunSpec(bs=8, accum=4, policy="per-micro-batch", scheduler="linear"))
    assert (pair.reference.bs, pair.reference.accum, pair.reference.policy) == (32, 1, "per-update")
    assert pair.reference.scheduler == "linear"
    assert pair.name == "digits-linear-bs8x4-per-micro-batch-vs-bs32"


def test_factory_reference_is_accepted_and_named_safely():
    pair = PairSpec.build(RunSpec(bs=16, accum=2, scheduler="tests/fixtures/schedules.py:correct"))
    assert "/" not in pair.name and "schedules.py_correct" in pair.name


def test_tolerances_per_dtype_and_overrides():
    assert Tolerances.for_dtype("float64").params == 1e-9
    assert Tolerances.for_dtype("float32").params == 1e-4
    assert Tolerances.for_dtype("float64", params=1e-6).params == 1e-6
    with pytest.raises(SpecError, match="--tol-metrics must be a number >= 0"):
        Tolerances.for_dtype("float64", metrics=-1.0)


@pytest.mark.parametrize("changes,needle", [
    ({"amp": "fp16"}, "add --dtype float32"),
    ({"inject_overflow": (3,)}, "--inject-overflow needs --amp fp16"),
    ({"amp": "fp8"}, "--amp 'fp8' is not known; choose one of: off, fp16, bf16"),
    ({"amp": "bf16", "dtype": "float32"}, "--framework plain cannot train --amp bf16 here: "
                                          "lrcheck's own loop autocasts float16 only"),
    ({"amp": "bf16", "dtype": "float32", "framework": "fsdp"},
     "--amp bf16 applies to --framework deepspeed, not fsdp"),
    ({"amp": "fp16", "dtype": "float32", "framework": "deepspeed"},
     "--framework deepspeed cannot train --amp fp16 here: DeepSpeed's fp16 needs an "
     "accelerator that has it"),
    ({"amp": "bf16", "framework": "deepspeed"}, "add --dtype float32"),
    ({"amp": "fp16", "dtype": "float32", "inject_overflow": (-1,)}, "--inject-overflow must be"),
])
def test_amp_values(changes, needle):
    with pytest.raises(SpecError) as info:
        RunSpec(**changes)
    assert needle in str(info.value)


def test_amp_has_its_own_calibrated_tolerances():
    assert Tolerances.for_dtype("float32", "fp16").params == 5e-2
    pair = PairSpec.build(RunSpec(dtype="float32", amp="fp16", inject_overflow=[2]))
    assert pair.reference.inject_overflow == (2,)


def test_messages_name_nproc_as_the_user_typed_it_not_world():
    with pytest.raises(SpecError) as info:
        RunSpec(world=0)
    assert str(info.value) == "--nproc must be a whole number >= 1, got 0"


def test_ref_bs_mismatch_shows_the_candidate_s_own_breakdown():
    with pytest.raises(SpecError) as info:
        PairSpec.build(RunSpec(bs=8, accum=2, world=2), ref_bs=30)
    message = str(info.value)
    assert "bs 8 · accum 2 · nproc 2 = 32" in message and "set --ref-bs 32" in message
    assert "world" not in message
    with pytest.raises(SpecError) as info:
        PairSpec.build(RunSpec(bs=8, accum=2, world=2), ref_bs=15, ref_world=3)
    message = str(info.value)
    assert "--ref-bs 15 · --ref-nproc 3 = 45" in message
    assert "bs 8 · accum 2 · nproc 2 = 32" in message
    assert "world" not in message


def test_a_training_set_smaller_than_one_effective_batch_shows_the_breakdown():
    from lrcheck.plan.steps import plan_steps

    with pytest.raises(SpecError) as info:
        plan_steps(100, 16, 2, 4, 1, "drop")
    message = str(info.value)
    assert "bs 16 · accum 2 · nproc 4 = 128" in message and "world" not in message


def test_ludwig_runs_in_float32_in_one_process_and_is_compared_with_itself():
    """--framework ludwig (Ludwig itself is only in .venv-ludwig: specs need none of it)."""
    pair = PairSpec.build(RunSpec(framework="ludwig", bs=16, accum=2), ref_bs=32)
    assert pair.candidate.dtype == pair.reference.dtype == "float32"  # whatever was asked
    assert pair.tolerances == Tolerances.for_dtype("float32")
    assert (pair.reference.bs, pair.reference.accum, pair.reference.framework) == (32, 1, "ludwig")
    with pytest.raises(SpecError, match="compare it with itself, not with plain"):
        PairSpec.build(RunSpec(framework="ludwig"), ref_framework="plain")


@pytest.mark.parametrize("changes, needle", [
    ({"scheduler": "wsd"}, "--framework ludwig runs its own schedules"),
    ({"world": 2}, "--framework ludwig trains in one process here"),
    ({"task": "tokens"}, "choose a tabular task"),
    ({"resume_at_micro": 3}, "--resume-at-micro applies to lrcheck's own loop")])
def test_what_ludwig_cannot_do_is_refused(changes, needle):
    with pytest.raises(SpecError, match=needle):
        RunSpec(framework="ludwig", **changes)


def test_ludwig_resume_is_checked_against_the_same_run_uninterrupted():
    pair = PairSpec.build(RunSpec(framework="ludwig", bs=16, accum=2, resume_at=30), ref_bs=32)
    assert pair.reference == pair.candidate.replace(resume_at=None)
    with pytest.raises(SpecError, match="--resume-at applies to lrcheck's own loop"):
        RunSpec(framework="lightning", resume_at=3)


@pytest.mark.parametrize("samples", [10, 12, 15])
def test_a_generated_task_needs_samples_enough_for_its_stratified_split(samples):
    # synthetic has 4 classes: a test split of ceil(samples / 5) < 4 cannot hold each.
    with pytest.raises(SpecError) as info:
        RunSpec(task="synthetic", samples=samples)
    assert str(info.value).startswith("--samples must be a whole number >= 16 for --task "
                                      "synthetic:") and f"got {samples}" in str(info.value)
    assert RunSpec(task="synthetic", samples=16).samples == 16


@pytest.mark.parametrize("task", ["digits", "digits-bn", "breast-cancer", "wine"])
def test_samples_given_to_a_task_of_a_fixed_size_is_bad_input_naming_the_task(task):
    from lrcheck.experiments.tasks import TASKS

    with pytest.raises(SpecError) as info:
        PairSpec.build(RunSpec(task=task, samples=500))
    assert str(info.value) == (f"--samples 500 does not apply to --task {task}, which has a "
                               f"fixed size ({TASKS[task].size} samples); --samples sizes "
                               "--task synthetic or tokens")


@pytest.mark.parametrize("task", ["digits", "digits-bn", "breast-cancer", "wine", "synthetic",
                                  "tokens"])
def test_every_task_builds_with_the_default_samples(task):
    from lrcheck.experiments.tasks import GENERATED_SAMPLES, TASKS

    pair = PairSpec.build(RunSpec(task=task, bs=4, accum=2))
    want = GENERATED_SAMPLES if TASKS[task].generated else None
    assert pair.candidate.samples == pair.reference.samples == want
    assert pair.name == f"{task}-cosine-bs4x2-vs-bs8"  # the default size is not in the name
    assert PairSpec.build(RunSpec(**pair.candidate.to_dict())) == pair  # as result.json has it


def test_a_batch_larger_than_a_fixed_size_task_s_training_set_names_the_candidate_s_flags():
    with pytest.raises(SpecError) as info:
        PairSpec.build(RunSpec(task="wine", bs=16, accum=100))
    assert str(info.value) == ("the training set of --task wine has 142 samples, fewer than "
                               "one effective batch (bs 16 · accum 100 · nproc 1 = 1600); "
                               "lower --bs or --accum")
    PairSpec.build(RunSpec(task="wine", bs=71, accum=2))  # 142: one update an epoch


def test_fixed_choices_are_str_enums_that_read_and_serialise_as_their_values():
    import json

    from lrcheck.spec import Dtype, Tail, TrainerLoss

    spec = RunSpec(dtype="float32", tail="flush", trainer_loss="mean")
    assert spec.dtype is Dtype.FLOAT32 and spec.tail is Tail.FLUSH
    assert spec.dtype == "float32" and f"{spec.dtype}" == "float32" and repr(spec.dtype) == \
        "'float32'"
    data = spec.to_dict()
    assert type(data["dtype"]) is str and json.loads(json.dumps(data)) == data
    assert RunSpec(**data) == spec and hash(RunSpec(**data)) == hash(spec)
    assert {"num-items": 1}[TrainerLoss.NUM_ITEMS] == 1  # hashes as its value
    with pytest.raises(SpecError, match=r"--dtype 'float16' is not known; choose one of: "
                                        r"float64, float32"):
        RunSpec(dtype="float16")
