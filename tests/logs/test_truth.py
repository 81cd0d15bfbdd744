"""``logs.truth``: hand-built logs (``LoggedRun``) held against hand-built recorded lines, every
finding and the update it starts at; float32 values, a loss rounded to 4 decimals and a loss
averaged over each logging window are recognised, not called bugs."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from lrcheck.logs.model import LogFormat, LoggedRun, LossIs, Quantity, Series, StepMeaning
from lrcheck.logs.truth import DIFFERS, MATCHES, UNKNOWN, hold

GA = 2
N = 8
LRS = [1e-3 * (k + 1) / N for k in range(N)]  # warmup: every update's LR its own
MICRO = [[0.5 / (k + 1) + 0.01 * m for m in range(GA)] for k in range(N)]
PRE = [3.0 - 0.3 * k for k in range(N)]  # above max_norm 1.5 until update 5


def _records(clip=True):
    out = []
    for k in range(N):
        line = {"step": k, "samples_seen": k + 1, "lr": [LRS[k]], "loss_micro": MICRO[k],
                "loss_backward": sum(MICRO[k]), "clip_grad_norm": int(clip)}
        if clip:
            line.update(clip_norm=PRE[k], max_norm=1.5)
        out.append(line)
    return out


def _log(quantity, values, steps=None, dtype="float32", first=0):
    steps = tuple(range(first, first + len(values))) if steps is None else tuple(steps)
    if dtype == "float32":
        values = np.asarray(values, dtype=np.float32).astype(float)
    series = Series(quantity, quantity.value, steps, tuple(float(v) for v in values), dtype)
    return LoggedRun(Path("logs"), LogFormat.TENSORBOARD, {quantity: series},
                     StepMeaning(first=first, how=f"detected: steps count updates from {first}"))


def _one(log, records=None):
    (finding,) = hold(log, _records() if records is None else records, "candidate")
    return finding


def test_the_lr_each_update_used_matches_in_float32_and_1_based_steps():
    found = _one(_log(Quantity.LR, LRS, first=1))
    assert (found.status, found.first_update) == (MATCHES, None)
    assert found.says == ("the logged LR is the LR each update used, at the 8 updates logged; "
                          "steps: detected: steps count updates from 1, as the recording "
                          "confirms")


def test_the_next_updates_lr_is_named_off_by_one_from_update_0():
    found = _one(_log(Quantity.LR, LRS[1:]))
    assert (found.status, found.first_update) == (DIFFERS, 0)
    assert found.says.startswith("the logged LR is the next update's (off by one from update 0)")


def test_an_lr_that_parts_later_is_named_at_its_update():
    lrs = [*LRS[:5], *(2 * v for v in LRS[5:])]
    found = _one(_log(Quantity.LR, lrs))
    assert (found.status, found.first_update) == (DIFFERS, 5)
    assert "from update 5" in found.says


def test_the_loss_differentiated_matches():
    found = _one(_log(Quantity.LOSS, [sum(m) for m in MICRO]))
    assert found.status == MATCHES and "the loss each update differentiated" in found.says


@pytest.mark.parametrize("factor, words", [(GA, "2.000×"), (1 / GA, "0.500×")])
def test_a_loss_scaled_by_ga_is_a_logging_scale(factor, words):
    found = _one(_log(Quantity.LOSS, [factor * sum(m) for m in MICRO]))
    assert (found.status, found.first_update) == (DIFFERS, 0)
    assert found.says.startswith(f"the logged loss is {words} the loss that was differentiated")
    assert "at every update: a logging scale, the training matches; steps: " in found.says
    assert ("before ÷ GA" if factor > 1 else "once more") in found.says


def test_a_loss_averaged_over_each_logging_window_rounded_to_4_decimals_matches():
    losses = [sum(m) for m in MICRO]
    ks = [3, 7]  # logging_steps 4, 1-based steps 4 and 8
    means = [round(float(np.mean(losses[0:4])), 4), round(float(np.mean(losses[4:8])), 4)]
    found = _one(_log(Quantity.LOSS, means, steps=[k + 1 for k in ks], dtype="float64",
                      first=1))
    assert found.status == MATCHES, found.says
    assert "averaged over each logging window" in found.says
    # the same windows at twice the loss: the scale is named, the windows recognised
    doubled_means = [round(float(2 * np.mean(losses[a:a + 4])), 4) for a in (0, 4)]
    doubled = _one(_log(Quantity.LOSS, doubled_means, steps=[4, 8], dtype="float64", first=1))
    assert doubled.status == DIFFERS and "2.000×" in doubled.says


def test_a_micro_batchs_loss_is_named():
    found = _one(_log(Quantity.LOSS, [m[-1] for m in MICRO]))
    assert (found.status, found.first_update) == (DIFFERS, 0)
    assert found.says.startswith("the logged loss is a micro-batch's, not the update's: the "
                                 "last of each update's 2 micro-batches")


@pytest.mark.parametrize("times, words", [(1, "as differentiated (÷ GA)"),
                                          (GA, "its own loss (before ÷ GA)"),
                                          (2 * GA, "2.000× its own loss")])
def test_a_micro_batchs_loss_is_named_with_its_scale(times, words):
    found = _one(_log(Quantity.LOSS, [times * m[-1] for m in MICRO]))
    assert f"the last of each update's 2 micro-batches, {words}, from update 0;" in found.says


def test_a_loss_that_parts_is_named_at_its_update():
    losses = [sum(m) for m in MICRO]
    losses[6] += 0.1
    found = _one(_log(Quantity.LOSS, losses))
    assert (found.status, found.first_update) == (DIFFERS, 6)


def test_the_pre_clip_norm_is_named_with_the_clips_max_norm():
    found = _one(_log(Quantity.GRAD_NORM, PRE))
    assert (found.status, found.first_update) == (DIFFERS, 0)
    assert found.says.startswith("the logged grad norm is the pre-clip norm: clipping to "
                                 "max_norm 1.5 did happen, at 5 of the 8 updates logged")


def test_the_post_clip_norm_matches():
    post = [min(p, 1.5 * p / (p + 1e-6)) for p in PRE]
    found = _one(_log(Quantity.GRAD_NORM, post))
    assert found.status == MATCHES and "the post-clip norm" in found.says


def test_a_norm_where_no_clip_ran_and_no_fingerprint_is_unknown():
    found = _one(_log(Quantity.GRAD_NORM, PRE), _records(clip=False))
    assert found.status == UNKNOWN


def test_a_loss_the_recording_lacks_is_unknown_and_only_logged_quantities_are_found():
    records = [{k: v for k, v in r.items() if not k.startswith("loss")} for r in _records()]
    assert _one(_log(Quantity.LOSS, [1.0] * N), records).status == UNKNOWN
    lr = _log(Quantity.LR, LRS)
    assert [f.quantity for f in hold(lr, records, "reference")] == [Quantity.LR]


def test_values_logged_past_the_recording_are_left_out_and_said():
    found = _one(_log(Quantity.LR, [*LRS, 1.0, 1.0]))
    assert found.status == MATCHES
    assert "2 logged values at updates the recording does not have" in found.says


def test_an_lr_stepped_within_updates_is_said_to_be_the_trainings():
    records = [{**r, "scheduler_steps": 2, "lr": [LRS[k] * 0.9]} for k, r in enumerate(_records())]
    found = _one(_log(Quantity.LR, LRS), records)
    assert (found.status, found.first_update) == (DIFFERS, 0)
    assert "the scheduler stepped up to 2 times between two updates" in found.says
    assert "a difference of the training (the lr check judges it)" in found.says


def test_a_loss_stored_as_float64_but_summed_in_float32_matches():
    losses = [float(np.float32(sum(m)) * (1 + 3e-7)) for m in MICRO]  # trainer_state.json's
    found = _one(_log(Quantity.LOSS, losses, dtype="float64"))
    assert found.status == MATCHES, found.says


def test_a_log_given_that_cannot_be_read_is_one_unknown_finding_not_an_error(tmp_path):
    from lrcheck.record.logged import findings

    (found,) = findings(tmp_path, "candidate", tmp_path / "no-such-log")
    assert (found.quantity, found.status, found.first_update) == (None, UNKNOWN, None)
    assert found.says.startswith("the log given could not be read: ")
    assert "no-such-log" in found.says and found.to_dict()["quantity"] is None
    assert found.what == "—"


def test_an_unknown_finding_of_no_quantity_is_valid_against_the_schema():
    """result.json's ``logs`` holds it (a log that could not be read): quantity null."""
    import jsonschema

    from lrcheck.logs.truth import LogFinding
    from lrcheck.schemas import load

    schema = load("result")
    finding = LogFinding("candidate", None, UNKNOWN, "the log given could not be read", None,
                         "x").to_dict()
    jsonschema.validate(finding, {"$defs": schema["$defs"], "$ref": "#/$defs/log_finding"})


def test_a_log_read_with_the_convention_the_recording_shows():
    """A log whose steps count updates from 1 (a global_step), or micro-batches, read as it
    says nothing of it: the convention under which it matches is found and named; a log of the
    next update's LR from step 0 is not read as one from 1 (step 0 would be update -1)."""
    found = _one(replace(_log(Quantity.LR, LRS, steps=range(1, N + 1)), steps=StepMeaning()))
    assert found.status == MATCHES
    assert found.says.endswith("steps: found from the recording: steps count updates from 1 "
                               "(a global_step read after the update, as the Trainer's), under "
                               "which the log matches it (the log alone: steps count updates "
                               "from 0)")
    micro = _log(Quantity.LR, [v for v in LRS for _ in range(GA)], steps=range(GA * N))
    found = _one(replace(micro, steps=StepMeaning()))
    assert found.status == MATCHES and "steps count micro-batches from 0, 2 per update" in (
        found.says)
    found = _one(replace(_log(Quantity.LR, LRS[1:]), steps=StepMeaning()))
    assert found.status == DIFFERS and "off by one from update 0" in found.says
    steps = tuple(range(1, N + 1))  # the Trainer's: its LR and its loss x GA at global_step
    times_ga = LoggedRun(Path("logs"), LogFormat.TRAINER_STATE, {
        Quantity.LR: Series(Quantity.LR, "learning_rate", steps, tuple(LRS)),
        Quantity.LOSS: Series(Quantity.LOSS, "loss", steps, tuple(GA * sum(m) for m in MICRO))})
    lr, loss = hold(times_ga, _records(), "candidate")
    assert lr.status == MATCHES and "steps count updates from 1" in lr.says
    assert loss.says.startswith("the logged loss is 2.000× the loss that was differentiated")


def test_a_log_with_nothing_mappable_is_one_unknown_finding_that_lists_its_tags(tmp_path):
    from lrcheck.record.logged import findings

    log = tmp_path / "lightning_logs" / "version_0" / "metrics.csv"
    log.parent.mkdir(parents=True)
    log.write_text("step,val_acc\n0,0.5\n", encoding="utf-8")
    (found,) = findings(tmp_path, "candidate", tmp_path)
    assert (found.quantity, found.status) == (None, UNKNOWN)
    assert "no LR, loss or gradient norm among its tags (val_acc)" in found.says


def test_lightnings_micro_batch_loss_is_said_to_be_what_its_self_log_logs():
    log = replace(_log(Quantity.LOSS, [m[-1] for m in MICRO], dtype="float64"),
                  loss_is=LossIs.MICRO_BATCH)
    found = _one(log)
    assert found.status == DIFFERS and "what Lightning's self.log on a step logs" in found.says


def test_a_stated_count_per_update_left_out_is_the_recordings():
    from lrcheck.logs.steps import stated_steps

    micro = _log(Quantity.LR, [v for v in LRS for _ in range(GA)], steps=range(GA * N))
    found = _one(replace(micro, steps=stated_steps("micro-batches")))
    assert found.status == MATCHES and found.says.endswith(
        "steps: stated: steps count micro-batches from 0, 2 per update")
    seen = _log(Quantity.LR, LRS, steps=range(16, 16 * (N + 1), 16))  # samples after each
    found = hold(replace(seen, steps=stated_steps("samples")), _records(), "candidate", 16)[0]
    assert found.status == MATCHES, found.says
