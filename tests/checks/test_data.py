"""The ``data`` check and the diagnosis of a ``params`` or ``loss`` failure, on hand-made windows:
the epoch of 93 samples cut into updates of 32 (the last one 29), as one batch per update in the
reference and as micro-batches (and ranks) in the candidate."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from lrcheck.checks import check_data, run_checks
from lrcheck.diagnosis import weights_text
from lrcheck.environment import Environment
from lrcheck.plan.windows import MicroBatch, Window
from lrcheck.spec import RunSpec, Tolerances
from lrcheck.trace import EpochMetrics, RunTrace, UpdateRecord

PERM = np.random.default_rng(0).permutation(93)
CUTS = [(0, 32), (32, 64), (64, 93)]  # the epoch's updates: 32, 32, 29


def mb(rank: int, ids, weight: float | None = None) -> MicroBatch:
    return MicroBatch(rank, np.asarray(ids, dtype=np.int64), weight)


def run(windows: list[Window], *, lrs=None, params=None, epochs=None) -> RunTrace:
    """A run of these windows, its updates in ``epochs`` (all 0 unless given), with these LRs
    and parameter snapshots (all alike unless given)."""
    n = len(windows)
    lrs = lrs if lrs is not None else [0.1] * n
    epochs = epochs if epochs is not None else [0] * n
    seen = np.cumsum([sum(len(m.ids) for m in w) for w in windows])
    updates = [UpdateRecord(k, (lrs[k],), 1.0, int(seen[k]), k, epochs[k]) for k in range(n)]
    params = np.asarray(params if params is not None else np.ones((n, 3)), dtype=np.float64)
    return RunTrace(RunSpec(), updates, [EpochMetrics(0, n - 1, 0.9, 0.9)], params, n, None,
                    windows=list(windows))


def reference(epochs: int = 1) -> RunTrace:
    """bs 32, one process: one batch per update, weight 1."""
    windows = [(mb(0, PERM[a:b], 1.0),) for _ in range(epochs) for a, b in CUTS]
    return run(windows, epochs=[e for e in range(epochs) for _ in CUTS])


def micro(ids: np.ndarray, bs: int, world: int, weight) -> Window:
    """``ids`` cut as lrcheck's loop cuts them: micro-batches of ``bs·world``, rank r taking
    every ``world``-th sample; ``weight(n)`` for a micro-batch of n samples."""
    shares = [ids[m:m + bs * world][r::world] for m in range(0, len(ids), bs * world)
              for r in range(world)]
    return tuple(mb(i % world, share, weight(len(share))) for i, share in enumerate(shares))


def candidate(bs: int, world: int, weight, params_from: int | None = None,
              lrs=None) -> RunTrace:
    windows = [micro(PERM[a:b], bs, world, lambda n, total=b - a: weight(n, total))
               for a, b in CUTS]
    params = np.ones((3, 3))
    if params_from is not None:
        params[params_from:] += 1e-3
    return run(windows, params=params, lrs=lrs)


def by_samples(n: int, total: int) -> float:
    return n / total


def checks(ref: RunTrace, cand: RunTrace) -> dict:
    return {c.name: c for c in run_checks(ref, cand, Tolerances())}


# --- the data check -------------------------------------------------------------------------


def test_the_same_samples_however_cut_into_micro_batches_and_ranks_pass():
    ref = reference()
    for bs, world in ((16, 1), (8, 2), (4, 2), (13, 3)):
        result = check_data(ref, candidate(bs, world, by_samples))
        assert result.status == "pass", (bs, world, result)
        assert result.detail == "the same samples behind all 3 updates"
        assert result.first_divergence is None


def test_a_run_without_windows_is_skipped():
    ref, cand = reference(), candidate(16, 1, by_samples)
    ref.windows = None
    result = check_data(ref, cand)
    assert result.status == "skip" and "reference has no samples per update" in result.detail


def test_different_samples_name_the_first_update_and_both_sides():
    ref = reference()
    cand_windows = [(mb(0, PERM[a:b], 1.0),) for a, b in CUTS]
    # Update 1 was fed 3 samples of update 0 in place of 3 of its own.
    swapped = PERM[32:64].copy()
    swapped[:3] = PERM[:3]
    cand_windows[1] = (mb(0, swapped, 1.0),)
    result = check_data(ref, run(cand_windows))
    print(result.detail)
    assert result.status == "fail" and result.first_divergence == 1
    only_cand = ", ".join(str(i) for i in sorted(PERM[:3]))
    only_ref = ", ".join(str(i) for i in sorted(PERM[32:35]))
    assert result.detail.startswith(
        f"update 1: 3 samples only in the candidate (ids {only_cand}), 3 samples only in the "
        f"reference (ids {only_ref}); 1 of 3 updates differ")
    assert (f"3 samples twice in an epoch where the reference saw them once (epoch 0: ids "
            f"{only_cand})") in result.detail
    assert f"3 samples never in an epoch where the reference saw them (epoch 0: ids {only_ref})" \
        in result.detail


def test_padding_of_uneven_ranks_shows_as_samples_seen_twice():
    """A DistributedSampler (or Accelerate's even_batches) fills the last round with the
    epoch's first samples: the last update holds 32 samples where the reference has 29."""
    ref = reference()
    cand = candidate(8, 2, by_samples)
    last = np.concatenate([PERM[64:93], PERM[:3]])
    cand.windows[2] = micro(last, 8, 2, lambda n: n / 32)
    result = check_data(ref, cand)
    print(result.detail)
    assert result.status == "fail" and result.first_divergence == 2
    assert "update 2: 3 samples only in the candidate" in result.detail
    assert "only in the reference" not in result.detail
    assert "3 samples twice in an epoch where the reference saw them once" in result.detail
    assert "padding of uneven ranks" in result.detail and "never" not in result.detail


def test_a_partial_window_carried_into_the_next_update_is_named_not_padding():
    """A user's loop that leaves an epoch's last, partial window in the gradients (no step,
    no zero_grad) adds its micro-batches to the next update: that window begins with one
    micro-batch more on each rank, holding the extra samples."""
    ref = reference()
    cand = candidate(8, 2, by_samples)
    left = (mb(0, [100, 101, 102, 103], 0.1), mb(1, [104, 105, 106, 107], 0.1))
    cand.windows[1] = (*left, *cand.windows[1])
    result = check_data(ref, cand)
    assert result.status == "fail" and result.first_divergence == 1
    assert "update 1: 8 samples only in the candidate" in result.detail
    assert ("its window holds 3 micro-batches on each rank where the candidate's others hold 2: "
            "its first, fed after the update before, made no update of its own") in result.detail
    assert "neither stepped nor zeroed" in result.detail and "padding" not in result.detail
    cand.windows[1] = (*cand.windows[1][2:4], *left, *cand.windows[1][4:])  # not first: no
    assert "neither stepped nor zeroed" not in check_data(ref, cand).detail


def test_an_epoch_fed_again_in_the_first_epochs_order_is_named():
    """A DistributedSampler whose ``set_epoch`` is never called feeds every epoch in the first
    epoch's order; the reference draws a new one."""
    ref = reference(epochs=2)
    second = np.random.default_rng(1).permutation(93)
    ref.windows[3:] = [(mb(0, second[a:b], 1.0),) for a, b in CUTS]
    cand = candidate(8, 2, by_samples)
    cand = run([*cand.windows, *cand.windows], epochs=[0, 0, 0, 1, 1, 1])
    result = check_data(ref, cand)
    assert result.status == "fail" and result.first_divergence == 3
    assert ("from update 3 on the candidate was fed the samples of its updates from 0 on again"
            in result.detail and "set_epoch is never called" in result.detail)
    assert "set_epoch" not in check_data(cand, ref).detail  # the reference repeating: not so


def test_runs_that_did_not_say_their_epochs_are_counted_as_one_not_as_epoch_0():
    """A recorded command's updates have no epoch: 'in an epoch (epoch 0: …)' would claim what
    nobody recorded."""
    ref = reference()
    cand = candidate(8, 2, by_samples)
    cand.windows[2] = micro(np.concatenate([PERM[64:93], PERM[:3]]), 8, 2, lambda n: n / 32)
    for trace in (ref, cand):
        trace.updates = [replace(u, epoch=None) for u in trace.updates]
    detail = check_data(ref, cand).detail
    assert "3 samples twice where the reference saw them once (ids " in detail
    assert "epoch" not in detail.split("over the run")[1]


def test_drop_last_shows_as_samples_never_seen():
    ref = reference(epochs=2)
    cand = run([(mb(0, PERM[a:b], 1.0),) for _ in range(2) for a, b in CUTS[:2]],
               epochs=[0, 0, 1, 1])
    result = check_data(ref, cand)
    print(result.detail)
    assert result.status == "fail"
    # By position, update 2 is the reference's short last update of epoch 0 and the
    # candidate's first of epoch 1.
    assert result.first_divergence == 2
    assert "then only the reference goes on" not in result.detail
    assert "58 samples never in an epoch where the reference saw them (in 2 epochs; epoch 0:" \
        in result.detail and "drop_last looks like this" in result.detail


def test_an_equal_prefix_then_only_one_run_goes_on():
    ref = reference()
    cand = run(ref.windows[:2])
    result = check_data(ref, cand)
    assert result.status == "fail" and result.first_divergence == 2
    assert result.detail.startswith("the same samples behind the first 2 updates, then only "
                                    "the reference goes on (3 reference, 2 candidate updates)")
    assert "29 samples never" in result.detail


# --- the diagnosis of params and loss -------------------------------------------------------


def test_equal_weights_on_the_last_partial_update_are_explained():
    cand = candidate(16, 1, lambda n, total: 0.5, params_from=2)
    found = checks(reference(), cand)
    params = found["params"]
    print(params.detail)
    assert found["data"].status == "pass"
    assert params.status == "fail" and params.first_divergence == 2
    assert params.detail.endswith(
        "; update 2 is the last of epoch 0: 29 samples (a full update has 32) in micro-batches "
        "of 16 and 13 (reference: one batch of 29); the same samples as the reference (`data` "
        "passes there), so the difference is their weights: each micro-batch's mean weighted "
        "1/2 instead of by its samples (16/29 and 13/29)")


def test_a_lone_last_micro_batch_given_half_the_gradient():
    ref = run([(mb(0, PERM[:32], 1.0),), (mb(0, PERM[32:45], 1.0),)])
    cand = run([(mb(0, PERM[:16], 0.5), mb(0, PERM[16:32], 0.5)), (mb(0, PERM[32:45], 0.5),)],
               params=[[1, 1, 1], [2, 2, 2]])
    params = checks(ref, cand)["params"]
    print(params.detail)
    assert params.first_divergence == 1
    assert ("update 1 is the last of epoch 0: 13 samples (a full update has 32) in one "
            "micro-batch (reference: one batch of 13)") in params.detail
    assert params.detail.endswith("the difference is their weights: its mean weighted 1/2 "
                                  "instead of 1")


def test_ranks_are_told_apart():
    cand = candidate(8, 2, lambda n, total: 0.25, params_from=2)
    params = checks(reference(), cand)["params"]
    print(params.detail)
    assert ("29 samples (a full update has 32) in micro-batches of 8 and 7 on rank 0, 8 and 6 "
            "on rank 1 (reference: one batch of 29)") in params.detail
    assert ("each micro-batch's mean weighted 1/4 instead of by its samples (8/29 and 7/29 on "
            "rank 0, 8/29 and 6/29 on rank 1)") in params.detail


def test_a_token_mean_per_micro_batch_names_the_references_weights_in_one_notation():
    """A token mean over each micro-batch, / 4, against the window's token mean (a padded batch:
    the micro-batches hold 1/4, 0.198, 0.302 and 1/4 of its tokens)."""
    shares = [0.25, 0.198, 0.302, 0.25]
    ref = (*(mb(0, PERM[8 * i:8 * i + 8], share) for i, share in enumerate(shares)),)
    cand = (*(mb(0, PERM[8 * i:8 * i + 8], 0.25) for i in range(4)),)
    assert weights_text(cand, ref, 32) == (
        "each micro-batch's mean weighted 1/4 instead of its samples' weight in the reference "
        "(0.25, 0.198, 0.302 and 0.25)")
    by_count = (*(mb(0, PERM[8 * i:8 * i + 8], 0.25) for i in range(3)), mb(0, PERM[24:30], 0.25))
    ref_count = (mb(0, PERM[:30], 1.0),)
    assert weights_text(by_count, ref_count, 30) == (
        "each micro-batch's mean weighted 1/4 instead of by its samples (4/15, 4/15, 4/15 and "
        "1/5)")


def test_different_samples_point_at_the_data_check():
    cand = candidate(16, 1, by_samples, params_from=2)
    cand.windows[2] = (mb(0, PERM[64:80], 0.5), mb(0, np.append(PERM[80:92], PERM[0]), 0.5))
    found = checks(reference(), cand)
    assert found["data"].status == "fail" and found["data"].first_divergence == 2
    assert found["params"].detail.endswith(
        "it was fed different samples from the reference's: see data")


def test_unmeasured_weights_give_only_the_sizes():
    cand = candidate(16, 1, lambda n, total: None, params_from=2)
    detail = checks(reference(), cand)["params"].detail
    assert detail.endswith("in micro-batches of 16 and 13 (reference: one batch of 29); the "
                           "same samples as the reference (`data` passes there; their weights "
                           "were not measured)")


def test_the_same_samples_and_weights_point_at_the_lr():
    cand = candidate(16, 1, by_samples, params_from=1, lrs=[0.1, 0.2, 0.1])
    found = checks(reference(), cand)
    assert found["lr"].status == "fail" and found["lr"].first_divergence == 1
    assert found["params"].detail.endswith(
        "update 1 (epoch 0): 32 samples in 2 micro-batches of 16 (reference: one batch of 32); "
        "the same samples with the same weights as the reference, so the difference is the LR: "
        "see lr")
    same_lr = checks(reference(), candidate(16, 1, by_samples, params_from=1))["params"]
    assert same_lr.detail.endswith("the same samples with the same weights and the same LR as "
                                   "the reference up to here")


def test_nothing_is_added_without_windows_or_to_a_pass():
    cand = candidate(16, 1, by_samples, params_from=2)
    cand.windows = None
    params = checks(reference(), cand)["params"]
    assert params.status == "fail" and params.detail.endswith("max relative 0.001")
    assert checks(reference(), candidate(16, 1, by_samples))["params"].status == "pass"


def test_the_explanation_is_in_the_table_report_md_and_result_json():
    import json

    from rich.console import Console

    from lrcheck.reports.files import report_markdown, result_json
    from lrcheck.reports.kinds import render
    from lrcheck.result import Report
    from lrcheck.spec import PairSpec

    pair = PairSpec.build(RunSpec(bs=16, accum=2), ref_bs=32)
    ref, cand = reference(), candidate(16, 1, lambda n, total: 0.5, params_from=2)
    ref.spec, cand.spec = pair.reference, pair.candidate
    report = Report(pair, ref, cand, run_checks(ref, cand, pair.tolerances),
                    Environment(lrcheck="test", device="cpu"))
    why = "each micro-batch's mean weighted 1/2 instead of by its samples (16/29 and 13/29)"
    console = Console(record=True, width=2000)
    console.print(render(report))
    assert why in console.export_text()
    assert why in report_markdown(report)
    checks = {c["name"]: c for c in json.loads(result_json(report))["checks"]}
    assert checks["params"]["detail"].endswith(why) and checks["data"]["status"] == "pass"


def test_a_loss_that_parts_after_the_parameters_points_at_params():
    """The loss of update k is computed from the parameters after update k - 1."""
    cand = candidate(16, 1, lambda n, total: 0.5, params_from=1)
    ref = reference()
    losses = [1.0, 1.0, 1.5]  # the candidate's loss parts at update 2, its params at 1
    cand.updates = [UpdateRecord(u.step, u.lr, losses[k], u.samples_seen, u.scheduler_steps,
                                 u.epoch) for k, u in enumerate(cand.updates)]
    found = checks(ref, cand)
    assert found["params"].first_divergence == 1 and found["loss"].first_divergence == 2
    assert found["loss"].detail.endswith(
        "; update 2 starts from parameters that already differ: see params, which part at "
        "update 1")


def test_different_samples_right_after_a_resume_are_put_down_to_it():
    from lrcheck.trace import Resumed

    ref = reference()
    windows = list(ref.windows)
    windows[1] = (mb(0, PERM[::-1][:32], 1.0),)  # the epoch started again after the resume
    cand = run(windows)
    cand.resumed = Resumed(1, 0, 1000)
    data = checks(ref, cand)["data"]
    assert data.status == "fail" and data.first_divergence == 1
    assert data.detail.endswith("; the candidate resumed from its checkpoint just before: its "
                                "data order did not go on where it stopped")
    assert "padding" not in data.detail
