"""``--framework accelerate``: the candidate trained through the real HF Accelerate, in one
process, against the plain bs-32 reference (the old ``--policy accelerate`` spelling is
tests/plan/test_frameworks.py's)."""

import pytest
import torch

accelerate = pytest.importorskip(
    "accelerate", reason="the accelerate extra is not installed: pip install 'lrcheck[accelerate]'")
pytestmark = pytest.mark.slow  # every test trains runs through Accelerate

import lrcheck  # noqa: E402
from lrcheck.plan.steps import plan_steps, schedule_context  # noqa: E402

EPOCHS = 2
UPDATES = 1437 // 32 * EPOCHS  # digits: 1437 training samples, 44 full updates of 32 an epoch


def summary(report) -> str:
    return "\n".join(f"{c.name}: {c.status} {c.detail}" for c in report.checks)


def through_accelerate(**candidate):
    settings = {"epochs": EPOCHS, "ref_framework": "plain", **candidate}
    return lrcheck.compare(framework="accelerate", **settings)


@pytest.mark.parametrize("accum", [1, 2, 4])
def test_accum_trains_exactly_like_bs_32(accum):
    report = through_accelerate(accum=accum, bs=32 // accum, ref_bs=32)
    assert report.ok, summary(report)
    params = report.check("params")
    assert params.max_rel_diff is not None and params.max_rel_diff <= 1e-9, summary(report)
    assert report.check("lr").max_abs_diff == 0.0
    assert len(report.candidate.updates) == UPDATES
    # scheduler.step() is called after every micro-batch; AcceleratedScheduler moved it once
    # per optimizer update.
    assert [u.scheduler_steps for u in report.candidate.updates[:3]] == [0, 1, 2]
    assert report.candidate.context.total_steps == UPDATES
    assert report.environment.frameworks["accelerate"] == accelerate.__version__


def test_the_flush_tail_is_accelerates_sync_at_the_end_of_the_dataloader():
    # 1437 = 44·32 + 29: Accelerate closes the window early on the loader's last micro-batch.
    report = through_accelerate(accum=2, bs=16, tail="flush")
    assert report.ok, summary(report)
    updates = report.candidate.updates
    assert len(updates) == 45 * EPOCHS
    assert updates[44].samples_seen - updates[43].samples_seen == 29


def test_a_schedule_sized_in_micro_batches_decays_only_half_way(schedules_file):
    """len(train_loader) * epochs counts micro-batches, but Accelerate steps once per update:
    the run ends near half the peak LR instead of near 0 (accelerate #1160)."""
    report = through_accelerate(accum=2, bs=16, scheduler=f"{schedules_file}:forgets_accum")
    lr = report.check("lr")
    assert lr.status == "fail" and lr.first_divergence == 1, summary(report)
    last_ref, last_cand = report.reference.updates[-1].lr[0], report.candidate.updates[-1].lr[0]
    assert last_ref == pytest.approx(0.05 / 88)
    assert last_cand == pytest.approx(0.05 * 89 / 176)


def test_a_schedule_sized_from_the_prepared_loader_is_right_on_one_process(schedules_file):
    report = through_accelerate(accum=2, bs=16,
                                scheduler=f"{schedules_file}:sized_from_prepared_loader")
    assert report.ok, summary(report)


def test_a_schedule_sized_from_the_prepared_loader_is_world_times_too_short(schedules_file):
    """The arithmetic behind the world-2 failure, without launching processes: on 2 processes
    the prepared loader has the per-rank length, AcceleratedScheduler takes 2 steps a update."""
    from tests.fixtures.schedules import sized_from_prepared_loader

    ctx = schedule_context(plan_steps(1437, 8, 2, 2, EPOCHS, "drop"), "per-update", 0.0,
                           "accelerate")
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.05)
    schedule = sized_from_prepared_loader(optimizer, ctx)
    assert schedule.total_iters == UPDATES
    assert ctx.total_steps == 2 * UPDATES


# Through the shared recording: what Accelerate's prepared loader really fed, on 2 processes,
# against a reference in Accelerate too (the default).

def window_ids(window) -> list[int]:
    return sorted(int(i) for m in window for i in m.ids)


def test_two_processes_against_a_reference_in_accelerate_report_what_was_fed():
    """The reference, trained by rank 0 after the candidate's job, keeps out of the job's
    process group (it crashed with "Accelerate sees process 0 of 2, lrcheck planned rank 0 of
    1"); every micro-batch of both ranks is recorded with its ids and measured weight."""
    report = lrcheck.compare(framework="accelerate", world=2, bs=8, accum=2, ref_bs=32,
                             epochs=EPOCHS, timeout=120)
    assert report.ok, summary(report)
    assert report.check("data").status == "pass" and report.check("weights").status == "pass"
    cand, ref = report.candidate.windows, report.reference.windows
    assert len(cand) == len(ref) == UPDATES
    for k in (0, UPDATES - 1):
        # 2 micro-batches of 8 on each rank, each mean weighted 8/32: measured, not planned.
        assert sorted((m.rank, len(m.ids), m.weight) for m in cand[k]) == [
            (0, 8, 0.25), (0, 8, 0.25), (1, 8, 0.25), (1, 8, 0.25)], cand[k]
        assert window_ids(cand[k]) == window_ids(ref[k])


def test_even_batches_fills_the_last_round_from_the_start_and_data_fails_there():
    """1437 = 44·32 + 29 with the flush tail, on 2 processes of bs 2: the epoch is 719
    batches, so rank 1 has one fewer and rank 0's last is a single sample; Accelerate's
    even_batches fills both from the start of the data. The candidate's last update is fed 32
    samples, 3 of them a second time in the epoch: ``data`` fails there, measured."""
    report = through_accelerate(world=2, bs=2, accum=8, ref_bs=32, tail="flush", epochs=1,
                                ref_framework=None)
    data = report.check("data")
    assert data.status == "fail" and data.first_divergence == 44, summary(report)
    cand, ref = report.candidate.windows[44], report.reference.windows[44]
    assert len(window_ids(ref)) == 29 and len(window_ids(cand)) == 32
    extra = sorted(set(window_ids(cand)) - set(window_ids(ref)))
    assert len(extra) == 3 and "3 samples only in the candidate" in data.detail, data.detail
    # The samples seen twice are the epoch's first ones.
    first = {int(i) for k in range(2) for m in report.candidate.windows[k] for i in m.ids}
    assert set(extra) <= first
    # Every update before it was fed exactly what the reference was.
    assert all(window_ids(report.candidate.windows[k]) == window_ids(report.reference.windows[k])
               for k in range(44))
