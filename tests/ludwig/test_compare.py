"""``--framework ludwig``: both runs through Ludwig's real ``LudwigModel.train`` (docs/ludwig.md
has the figures these tests pin)."""

import numpy as np
import pytest

import lrcheck
from lrcheck.plan.windows import window_ids

pytestmark = [pytest.mark.slow,  # every test trains through Ludwig
              # Ludwig 0.11's schemas, thousands of times per run: noise.
              pytest.mark.filterwarnings("ignore:The 'default' attribute of fields")]

EPOCHS = 2
N = 1437  # digits' training split: 89 micro-batches of 16 and one of 13 an epoch; 44 of 32 and 29


def summary(report) -> str:
    return "\n".join(f"{c.name}: {c.status} {c.detail}" for c in report.checks)


def through_ludwig(**candidate):
    return lrcheck.compare(framework="ludwig", epochs=EPOCHS, **candidate)


def test_ludwig_at_accum_1_trains_exactly_like_itself():
    report = through_ludwig(bs=32, accum=1, ref_bs=32)
    assert report.ok, summary(report)
    assert report.check("params").max_abs_diff == 0.0
    assert report.check("lr").max_abs_diff == 0.0
    assert report.candidate.spec.dtype == "float32"  # Ludwig's number features and model
    assert len(report.candidate.updates) == 45 * EPOCHS
    assert report.environment.frameworks["ludwig"] == "0.11.0"


def test_accum_2_steps_ludwigs_schedule_on_every_micro_batch():
    """Ludwig 0.11 sizes its schedule in micro-batches and steps it after each one
    (trainers/trainer.py, _train_loop): at update k the candidate's schedule has made 2k+1 steps
    of 180, the reference's k of 90, so the candidate reads its LR half an update ahead."""
    report = through_ludwig(bs=16, accum=2, ref_bs=32, scheduler="linear")
    lr = report.check("lr")
    assert lr.status == "fail" and lr.first_divergence == 0, summary(report)
    assert "2 steps per update against 1" in lr.detail
    assert "0.5 updates ahead" in lr.detail
    ref, cand = report.reference, report.candidate
    assert [u.scheduler_steps for u in cand.updates[:3]] == [1, 3, 5]
    assert [u.scheduler_steps for u in ref.updates[:3]] == [0, 1, 2]
    assert (cand.context.total_steps, ref.context.total_steps) == (180, 90)
    assert (cand.context.warmup_steps, ref.context.warmup_steps) == (18, 9)
    # Linear warmup in Ludwig's steps: 0.05 · steps / warmup steps.
    assert cand.updates[1].lr[0] == pytest.approx(0.05 * 3 / 18)
    assert ref.updates[1].lr[0] == pytest.approx(0.05 * 1 / 9)
    assert len(cand.updates) == len(ref.updates) == 45 * EPOCHS


def test_both_runs_are_fed_the_same_samples_in_ludwigs_own_order():
    """Ludwig's sampler permutes the rows with RandomState(seed + epoch), whatever the batch
    size (ludwig/data/sampler.py): every update of both runs holds the same samples."""
    report = through_ludwig(bs=16, accum=2, ref_bs=32, scheduler="constant", warmup=0.0)
    ref, cand = report.reference.windows, report.candidate.windows
    assert ref is not None and cand is not None and len(ref) == len(cand) == 45 * EPOCHS
    for k, (a, b) in enumerate(zip(ref, cand, strict=True)):
        assert np.array_equal(np.sort(window_ids(a)), np.sort(window_ids(b))), k
    for epoch in range(EPOCHS):
        fed = np.concatenate([window_ids(w) for w in cand[45 * epoch:45 * (epoch + 1)]])
        assert np.array_equal(fed, np.random.RandomState(0 + epoch).permutation(N))


def test_with_equal_lrs_only_the_epochs_last_window_parts():
    """A constant LR without warmup is the same whichever steps count: what is left is the
    epoch's last window, 16 + 13 samples, where Ludwig divides each micro-batch's mean by the
    accumulation steps (trainer.py, train_step) — weight 1/2 each instead of 16/29 and 13/29."""
    report = through_ludwig(bs=16, accum=2, ref_bs=32, scheduler="constant", warmup=0.0)
    assert report.check("lr").status == "pass", summary(report)
    params = report.check("params")
    assert params.status == "fail" and params.first_divergence == 44, summary(report)
    last = report.candidate.windows[44]
    assert [len(m.ids) for m in last] == [16, 13]
    assert [m.weight for m in last] == [0.5, 0.5]
    assert [m.weight for m in report.reference.windows[44]] == [1.0]


def test_resume_restarts_ludwigs_schedule_and_its_epoch():
    """Stopped after update 30 (Ludwig's Ctrl-C path) and resumed through model_resume_path:
    Ludwig builds a new LR scheduler after loading the checkpoint, and starts the epoch's data
    again from its first batch."""
    report = through_ludwig(bs=16, accum=2, scheduler="linear", resume_at=30)
    assert report.pair.reference.resume_at is None
    assert (report.pair.reference.bs, report.pair.reference.accum) == (16, 2)
    assert report.candidate.resumed is not None and report.candidate.resumed.update == 31
    lr = report.check("lr")
    assert lr.status == "fail" and lr.first_divergence == 31, summary(report)
    assert "its schedule started again from the beginning" in lr.detail
    assert "fed other samples" in lr.detail
    cand = report.candidate
    assert cand.updates[31].scheduler_steps == cand.updates[0].scheduler_steps == 1
    assert np.array_equal(window_ids(cand.windows[31]), window_ids(cand.windows[0]))
    assert report.check("updates").status == "pass"  # Ludwig still counts its steps on
