"""Paired runs through ``lrcheck.compare``: the numbers the product promises, with tolerances
stated and expected vs got printed on failure."""

import pytest

import lrcheck
from lrcheck.trace import SkippedStep

EPOCHS = 3


def summary(report) -> str:
    return "\n".join(f"{c.name}: {c.status} {c.detail}" for c in report.checks)


# One recording per pair, shared by the tests that judge it (each trains for seconds).

@pytest.fixture(scope="module")
def accum2():
    """The default pair, bs 16 x accum 2 against bs 32."""
    return lrcheck.compare(epochs=EPOCHS)


@pytest.fixture(scope="module")
def per_micro_batch():
    return lrcheck.compare(accum=2, bs=16, epochs=EPOCHS, policy="per-micro-batch")


@pytest.fixture(scope="module")
def per_micro_batch_scaled():
    return lrcheck.compare(accum=2, bs=16, epochs=EPOCHS, policy="per-micro-batch-scaled")


@pytest.mark.slow
def test_accum_2_bs_16_trains_exactly_like_bs_32(accum2):
    assert accum2.ok, summary(accum2)
    pair = accum2.pair
    assert (pair.candidate.bs, pair.candidate.accum, pair.reference.bs) == (16, 2, 32)
    params = accum2.check("params")
    assert params.max_rel_diff is not None and params.max_rel_diff <= 1e-9, summary(accum2)
    assert accum2.check("lr").max_abs_diff == 0.0
    assert accum2.to_dict()["judging"] == "lockstep" and accum2.candidate.lockstep
    assert len(accum2.candidate.updates) == 1437 // 32 * EPOCHS
    first = accum2.candidate.updates[0]
    assert first.samples_seen == 32 and first.scheduler_steps == 0 and len(first.lr) == 2


@pytest.mark.slow
def test_per_micro_batch_fails_lr_at_an_early_update(per_micro_batch):
    report = per_micro_batch
    lr = report.check("lr")
    # The scheduler has stepped once, after micro-batch 0, before update 0's optimizer.step().
    assert lr.status == "fail" and lr.first_divergence == 0, summary(report)
    assert f"update {lr.first_divergence}" in lr.detail
    assert report.candidate.updates[1].scheduler_steps == 3  # stepped on every micro-batch
    assert report.exit_code == 1
    assert any("before `optimizer.step()`" in w for w in report.candidate.warnings or ())


@pytest.mark.slow
def test_per_micro_batch_scaled_is_close_but_not_equal(per_micro_batch_scaled, per_micro_batch):
    """Ludwig's fix: the LR moves within each window; lrcheck measures how much."""
    scaled, buggy = per_micro_batch_scaled, per_micro_batch
    assert scaled.check("lr").status == "fail"
    assert scaled.check("lr").max_abs_diff < buggy.check("lr").max_abs_diff / 5


@pytest.mark.slow
def test_digits_bn_warns_on_params_with_the_batchnorm_reason():
    report = lrcheck.compare(task="digits-bn", accum=2, bs=16, epochs=EPOCHS)
    params = report.check("params")
    assert params.status == "warn" and "BatchNorm" in params.detail, summary(report)
    assert report.check("lr").status == "pass"
    assert report.ok


@pytest.mark.slow
def test_a_factory_that_forgets_accum_fails(schedules_file):
    bad = lrcheck.compare(accum=2, bs=16, epochs=EPOCHS,
                          scheduler=f"{schedules_file}:forgets_accum")
    good = lrcheck.compare(accum=2, bs=16, epochs=EPOCHS, scheduler=f"{schedules_file}:correct")
    assert bad.check("lr").status == "fail" and bad.check("lr").first_divergence == 1
    assert good.ok, summary(good)


@pytest.mark.slow
@pytest.mark.parametrize("tail", ["flush", "carry"])
def test_tails_stay_exact_with_global_loss_normalisation(tail):
    report = lrcheck.compare(accum=2, bs=16, epochs=2, tail=tail)
    assert report.ok, summary(report)
    assert report.check("params").max_rel_diff <= 1e-9


@pytest.mark.slow
def test_mean_loss_normalisation_differs_on_the_ragged_flush_tail():
    # 1437 = 44*32 + 29: the short update's micro-batches hold 16 and 13 samples.
    report = lrcheck.compare(accum=2, bs=16, epochs=2, tail="flush", loss_norm="mean")
    loss = report.check("loss")
    assert loss.status == "fail" and loss.first_divergence == 44, summary(report)
    assert report.check("params").status == "fail"
    assert report.check("data").status == "pass"
    # The diagnosis says why, in the check's detail (the table, report.md, result.json).
    for name in ("params", "loss"):
        assert ("update 44 is the last of epoch 0: 29 samples (a full update has 32) in "
                "micro-batches of 16 and 13 (reference: one batch of 29)"
                ) in report.check(name).detail, summary(report)
        assert report.check(name).detail.endswith(
            "each micro-batch's mean weighted 1/2 instead of by its samples (16/29 and 13/29)")


@pytest.mark.slow
def test_the_default_compare_feeds_the_same_samples_behind_every_update(accum2):
    report = accum2
    data = report.check("data")
    n = len(report.candidate.updates)
    assert data.status == "pass" and data.detail == f"the same samples behind all {n} updates"
    assert report.candidate.windows is not None and len(report.candidate.windows) == n


@pytest.mark.slow
def test_a_schedule_half_an_update_ahead_is_named_in_the_lr_detail(per_micro_batch_scaled):
    report = per_micro_batch_scaled
    lr = report.check("lr")
    assert lr.status == "fail" and "its schedule runs half an update ahead" in lr.detail
    assert report.check("params").detail.endswith(
        "the same samples with the same weights as the reference, so the difference is the LR: "
        "see lr")


@pytest.mark.slow
def test_onecycle_stepped_per_micro_batch_stops_with_the_schedulers_error():
    report = lrcheck.compare(accum=2, bs=16, epochs=1, scheduler="onecycle",
                             policy="per-micro-batch")
    updates = report.check("updates")
    assert updates.status == "fail" and "Tried to step" in updates.detail, summary(report)


@pytest.mark.slow
@pytest.mark.parametrize("task", ["breast-cancer", "wine", "synthetic"])
def test_other_tasks_pass_with_adamw(task):
    sized = {"samples": 400} if task == "synthetic" else {}  # the others have their own size
    report = lrcheck.compare(task=task, accum=2, bs=8, epochs=2, optimizer="adamw", lr=0.003,
                             **sized)
    assert report.ok, summary(report)


@pytest.mark.slow
def test_float32_passes_within_the_calibrated_tolerance():
    report = lrcheck.compare(accum=4, bs=8, epochs=2, dtype="float32")
    assert report.ok, summary(report)
    assert report.check("params").max_rel_diff > 0  # float32 really is not bit-exact here


@pytest.mark.slow
@pytest.mark.parametrize("accum,bs", [(2, 16), (4, 8)])
def test_tokens_global_normalisation_is_exact_and_mean_is_not(accum, bs):
    """Variable-length sequences: the 2024 token-normalisation bug, measured."""
    common = dict(task="tokens", accum=accum, bs=bs, epochs=2, lr=0.5, samples=600)
    good = lrcheck.compare(**common)
    assert good.ok, summary(good)
    assert good.check("params").max_rel_diff <= 1e-9
    bad = lrcheck.compare(**common, loss_norm="mean")
    for name in ("params", "loss"):
        check = bad.check(name)
        assert check.status == "fail" and check.max_rel_diff > 1e-4, summary(bad)
    assert bad.check("lr").status == "pass"


@pytest.mark.slow
def test_a_skipped_fp16_step_holds_the_schedule_for_per_update_only():
    common = dict(accum=2, bs=16, epochs=1, dtype="float32", amp="fp16", inject_overflow=(3, 20))
    good = lrcheck.compare(**common)
    assert good.ok, summary(good)
    skipped = good.check("skipped-steps")
    assert skipped.status == "pass" and "3, 20" in skipped.detail
    assert good.candidate.skipped == [SkippedStep(update=3, scheduler_steps=0),
                                      SkippedStep(update=20, scheduler_steps=0)]
    # the skipped update used the same LR as the one after it: the schedule held still
    lrs = [u.lr[0] for u in good.candidate.updates]
    assert lrs[3] == lrs[4] and lrs[2] != lrs[3]
    bad = lrcheck.compare(**common, policy="per-micro-batch")
    skipped = bad.check("skipped-steps")
    assert skipped.status == "fail" and skipped.first_divergence == 3, summary(bad)
    assert "advanced 2 step(s) on skipped update 3" in skipped.detail


RESUME_SCHEDULERS = ["constant", "linear", "cosine", "cosine-restarts", "polynomial",
                     "inverse-sqrt", "wsd", "step", "exponential", "onecycle"]


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", RESUME_SCHEDULERS)
def test_resume_in_the_middle_of_a_window_trains_on_exactly(scheduler):
    # accum 4: micro-batch 41 is the second of update 10's four
    report = lrcheck.compare(accum=4, bs=8, epochs=1, scheduler=scheduler, resume_at_micro=41)
    assert report.ok, summary(report)
    assert report.candidate.resumed is not None
    assert report.candidate.resumed.update == 10
    assert report.candidate.resumed.micro_batches_done == 2
    assert report.check("params").max_rel_diff <= 1e-9


@pytest.mark.slow
def test_resume_after_an_update_and_a_schedule_in_a_closure(schedules_file):
    assert lrcheck.compare(accum=2, bs=16, epochs=1, resume_at=20).ok
    scheduler = f"{schedules_file}:closure_counter"
    whole = lrcheck.compare(accum=2, bs=16, epochs=1, scheduler=scheduler)
    assert whole.ok, summary(whole)  # without a resume the closure is fine
    resumed = lrcheck.compare(accum=2, bs=16, epochs=1, scheduler=scheduler, resume_at=20)
    lr = resumed.check("lr")
    # Update 21 runs on the LR restored with the optimizer's state; update 22's is the first the
    # rebuilt scheduler computes, from a count that started again.
    assert lr.status == "fail" and lr.first_divergence == 22, summary(resumed)


def test_a_resume_point_or_overflow_past_the_end_is_bad_input_before_training(monkeypatch):
    import lrcheck.runner.local as local
    from lrcheck.errors import SpecError

    monkeypatch.setattr(local, "run_local", lambda *a, **k: pytest.fail("trained anyway"))
    with pytest.raises(SpecError, match="--resume-at 500: the run has 44 updates"):
        lrcheck.compare(accum=2, bs=16, epochs=1, resume_at=500)
    with pytest.raises(SpecError, match="--inject-overflow 99: the run has 44 updates"):
        lrcheck.compare(accum=2, bs=16, epochs=1, dtype="float32", amp="fp16",
                        inject_overflow=(3, 99))


def test_accumulation_trains_exactly_like_the_big_batch_over_a_few_updates():
    # The fast tier's parity check: wine's training split, bs 8 x accum 2 against bs 16.
    report = lrcheck.compare(task="wine", accum=2, bs=8, epochs=1)
    assert report is not None and report.ok, summary(report)
    assert 0 < len(report.candidate.updates) == report.candidate.planned_updates <= 10
    assert report.check("lr").max_abs_diff == 0.0
    params = report.check("params")
    assert params.max_rel_diff is not None and params.max_rel_diff <= 1e-9, summary(report)


def test_samples_seen_counts_samples_for_token_tasks_too():
    report = lrcheck.compare(task="tokens", accum=2, bs=8, epochs=1, samples=200, lr=0.5)
    assert [u.samples_seen for u in report.candidate.updates[:2]] == [16, 32]


def refuse_training(monkeypatch):
    import lrcheck.runner.local as local
    import lrcheck.runner.simulate as simulate

    monkeypatch.setattr(local, "run_local", lambda *a, **k: pytest.fail("trained anyway"))
    monkeypatch.setattr(simulate, "simulate_pair", lambda *a, **k: pytest.fail("simulated"))


@pytest.mark.parametrize("function,own", [
    ("compare", "ref_bs, ref_world, ref_framework, tolerances, fast, timeout"),
    ("trace_schedule", "ref_bs, ref_world, ref_framework, tolerances, fast, timeout"),
])
def test_an_unknown_keyword_is_a_spec_error_listing_the_accepted_ones(monkeypatch, function, own):
    from lrcheck.errors import SpecError
    from lrcheck.spec.compare_options import CANDIDATE_FIELDS

    refuse_training(monkeypatch)
    call = getattr(lrcheck, function)
    with pytest.raises(SpecError) as info:
        call(nonsense=1, samples=100)
    message = str(info.value)
    assert message.startswith(f"lrcheck.{function}: unknown keyword 'nonsense'; it takes a "
                              "PairSpec or CompareOptions, or the candidate's RunSpec fields: "
                              "task, bs, accum,")
    assert message.endswith(f"; and {own}")
    assert all(name in message for name in CANDIDATE_FIELDS) and "twin" not in message
    with pytest.raises(SpecError, match=r"unknown keyword 'acum' \(did you mean 'accum'\?\)"):
        call(acum=2, samples=100)
    with pytest.raises(SpecError, match="unknown keywords 'a', 'b'"):
        call(a=1, b=2)


def test_a_pair_with_candidate_fields_beside_it_is_a_spec_error(monkeypatch):
    from lrcheck.errors import SpecError
    from lrcheck.spec import PairSpec, RunSpec

    refuse_training(monkeypatch)
    pair = PairSpec.build(RunSpec(task="wine", bs=8, accum=2))
    with pytest.raises(SpecError, match=r"lrcheck.compare: a PairSpec and the candidate's "
                                        r"fields \(accum=4\) together"):
        lrcheck.compare(pair, accum=4)
    with pytest.raises(SpecError, match="lrcheck.trace_schedule: pair must be a PairSpec or "
                                        "CompareOptions, got RunSpec"):
        lrcheck.trace_schedule(pair.candidate)



def test_diff_names_a_keyword_it_does_not_take(tmp_path):
    from lrcheck.errors import SpecError

    path = tmp_path / "run.jsonl"
    path.write_text('{"step": 0, "samples_seen": 8, "lr": [0.1], "loss": 1.0}\n')
    with pytest.raises(SpecError, match=r"^lrcheck.diff: unknown keyword 'tolerance' \(did you "
                                        r"mean 'tolerances'\?\); it takes the two Recorder "
                                        r"files or logs, tolerances, and how to read logs$"):
        lrcheck.diff(path, path, tolerance=0.1)
    with pytest.raises(SpecError, match="--tag and --log-steps say how to read logs; .* are "
                                        "recordings, not logs"):
        lrcheck.diff(path, path, tags=["lr=LearningRate"])


# The library refuses what the command refuses, with the same message: lrcheck.compare(), a
# suite's [[pair]] and lrcheck compare check the same things in one place (api, spec).

TORCHRUN_4 = {"TORCHELASTIC_RUN_ID": "job", "WORLD_SIZE": "4", "RANK": "0", "LOCAL_RANK": "0",
              "LOCAL_WORLD_SIZE": "4"}


def _inside_torchrun(monkeypatch):
    for name, value in TORCHRUN_4.items():
        monkeypatch.setenv(name, value)


def _command_error(*args: str) -> str:
    from typer.testing import CliRunner

    from lrcheck.cli import app

    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 2, result.output
    return " ".join(result.stderr.split())


def _suite_error(tmp_path, pair: str) -> str:
    from lrcheck.api import load_suite
    from lrcheck.reports.files import ReportFiles
    from lrcheck.suite.run import run_pairs

    (tmp_path / "s.toml").write_text(f"[[pair]]\nepochs = 1\n{pair}\n", encoding="utf-8")
    result = run_pairs(load_suite(tmp_path / "s.toml"), tmp_path / "out", files=ReportFiles())
    (outcome,) = result.outcomes
    assert outcome.report is None and outcome.error_code == 2, outcome.error
    return str(outcome.error)


@pytest.mark.parametrize("keywords,flags,says", [
    ({"timeout": 0}, ["--timeout", "0"], "--timeout must be a number of seconds > 0, got 0"),
    ({"timeout": -1.5}, ["--timeout", "-1.5"],
     "--timeout must be a number of seconds > 0, got -1.5"),
    ({"timeout": float("nan")}, ["--timeout", "nan"],
     "--timeout must be a number of seconds > 0, got nan"),
])
def test_compare_refuses_a_timeout_as_the_command_does(monkeypatch, keywords, flags, says):
    from lrcheck.errors import SpecError

    refuse_training(monkeypatch)
    with pytest.raises(SpecError) as raised:
        lrcheck.compare(epochs=1, **keywords)
    assert str(raised.value).startswith(says)
    assert f"lrcheck: error: {says}" in _command_error("compare", "--epochs", "1", *flags)
    # A pair given whole is checked too (a suite's pairs are).
    pair = lrcheck.PairSpec.build(lrcheck.RunSpec(epochs=1))
    with pytest.raises(SpecError, match="--timeout must be a number of seconds > 0"):
        lrcheck.compare(pair, **keywords)


@pytest.mark.parametrize("keywords,flags,pair,says", [
    ({"ref_world": 2}, ["--ref-nproc", "2"], "ref_nproc = 2",
     "--ref-nproc 2 inside torchrun, whose world size is 4: use --ref-nproc 1 or 4"),
    ({"world": 2}, ["--nproc", "2"], "nproc = 2",
     "--nproc 2 inside torchrun, whose world size is 4: drop --nproc"),
])
def test_compare_and_a_suite_pair_refuse_processes_as_the_command_does(
        monkeypatch, tmp_path, keywords, flags, pair, says):
    from lrcheck.errors import SpecError

    refuse_training(monkeypatch)
    _inside_torchrun(monkeypatch)
    with pytest.raises(SpecError) as raised:
        lrcheck.compare(epochs=1, **keywords)
    assert str(raised.value).startswith(says)
    assert f"lrcheck: error: {says}" in _command_error("compare", "--epochs", "1", *flags)
    assert _suite_error(tmp_path, pair).startswith(says)


def test_inside_torchrun_compare_takes_the_world_size_from_torchrun(monkeypatch):
    from lrcheck.api import comparison_options, comparison_pair

    _inside_torchrun(monkeypatch)
    pair = comparison_pair(comparison_options(bs=8, accum=1))
    assert (pair.candidate.world, pair.reference.bs, pair.reference.world) == (4, 32, 1)
    assert comparison_pair(comparison_options(bs=8, accum=1, ref_world=4)).reference.bs == 8


def test_the_old_policy_accelerate_is_rewritten_by_the_library_for_every_caller():
    from lrcheck.api import comparison_options, comparison_pair

    with pytest.warns(FutureWarning, match="--policy accelerate is now --framework accelerate "
                                           "--ref-framework plain"):
        pair = comparison_pair(comparison_options(policy="accelerate"))
    assert (pair.candidate.framework, pair.candidate.policy) == ("accelerate", "per-update")
    assert pair.reference.framework == "plain"


def test_the_package_exports_the_api_s_functions_themselves_lazily():
    """``lrcheck.compare`` (and the others) is ``lrcheck.api.compare``, its own signature and
    docstring, not a forwarder; ``import lrcheck`` imports neither lrcheck.api nor
    lrcheck.result at module level (``__getattr__`` does, on first use)."""
    import ast
    import inspect
    from pathlib import Path

    import lrcheck.api
    import lrcheck.result

    for name in ("compare", "trace_schedule", "diff", "save_report"):
        assert getattr(lrcheck, name) is getattr(lrcheck.api, name)
    assert lrcheck.Report is lrcheck.result.Report
    assert "ref_bs" not in inspect.signature(lrcheck.compare).parameters  # a keyword of **
    assert "progress" in inspect.signature(lrcheck.compare).parameters
    tree = ast.parse(Path(lrcheck.__file__).read_text(encoding="utf-8"))
    eager = {node.module for node in tree.body if isinstance(node, ast.ImportFrom)}
    assert not eager & {"lrcheck.api", "lrcheck.result"}
    with pytest.raises(AttributeError, match="module 'lrcheck' has no attribute 'comparee'"):
        lrcheck.comparee  # noqa: B018
