"""A resumed process joins its rank's timeline at the checkpoint it restored (``record.restore``),
the updates after it trained twice left out and said (``checks.continuation``): on processes'
files built in code."""

import json

import pytest

from lrcheck.checks.continuation import check_continuation
from lrcheck.record.folder import read_folder
from lrcheck.record.restore import positions, restore_point
from lrcheck.stepwise import Boundary
from tests.schema_files import process_json, run_json

MADE = 14  # the interrupted process's updates; a checkpoint every 4: the last after update 11


def _lines(count, *, step0=0, fp=True):
    """An AdamW process's Recorder lines: one scheduler.step() between updates, the state's
    step counter after each update, a fingerprint per update."""
    return [{"step": k, "samples_seen": 4 * (k + 1), "lr": [0.1], "loss": None,
             "fingerprint": [float(step0 + k + 1), 1.0] if fp else None,
             "scheduler_steps": int(k > 0), "opt_step": float(step0 + k + 1)}
            for k in range(count)]


def _standing(step, epoch=None, fp=None):
    return {"opt_step": float(step), "sched_epoch": step if epoch is None else epoch,
            "fingerprint": [float(step), 1.0] if fp is None else fp}


EARLIER = {"start": _standing(0, fp=[0.0, 1.0]), "end": _standing(MADE)}


def test_a_resume_is_placed_at_the_update_its_optimizer_step_counter_restored():
    restored = restore_point(_lines(MADE), EARLIER, {"start": _standing(12)})
    assert restored.at == 12 and restored.standing == _standing(12)


def test_the_schedule_places_a_resume_whose_optimizer_state_was_lost():
    start = {"opt_step": 0.0, "sched_epoch": 8, "fingerprint": [8.0, 1.0]}
    restored = restore_point(_lines(MADE), EARLIER, {"start": start})
    assert restored.at == 8 and restored.standing == _standing(8)


def test_a_schedule_that_stands_still_over_an_epoch_places_the_resume_by_its_weights():
    """SGD keeps no step counter and StepLR steps once an epoch (of 8 updates here): every
    update of an epoch ends at the same position; the weights the resume began with (or else
    the data its first update trains again) tell which update it restored."""
    lines = _lines(MADE)
    for k, line in enumerate(lines):
        line.update(opt_step=None, scheduler_steps=int(k == 8))  # StepLR's step after update 7
    earlier = {"start": {**_standing(0, epoch=0), "opt_step": None}, "end": None}
    start = {"opt_step": None, "sched_epoch": 1, "fingerprint": [12.0, 1.0]}  # after update 11
    assert positions(lines, earlier["start"], None)[7:13] == [1] * 6
    assert restore_point(lines, earlier, {"start": start}).at == 12
    unknown = {**start, "fingerprint": None}
    first = {**lines[10], "fed": [[5, 6]]}
    lines[10]["fed"] = [[5, 6]]
    assert restore_point(lines, earlier, {"start": unknown}, first).at == 10


def test_a_resume_from_where_the_process_stopped_or_from_nowhere_joins_at_its_end():
    for start in (_standing(MADE), _standing(0, epoch=0), _standing(30), None):
        assert restore_point(_lines(MADE), EARLIER, {"start": start}).at == MADE
    # in lockstep the process's weights became the reference's after each update: not its own
    lockstep = restore_point(_lines(MADE), {**EARLIER, "lockstep": "candidate"},
                             {"start": _standing(12)})
    assert lockstep.at == 12 and lockstep.standing["fingerprint"] is None


def test_the_schedules_positions_count_the_steps_after_each_update():
    lines = _lines(4)
    lines[2]["scheduler_steps"] = 2  # two steps after update 1
    assert positions(lines, {"sched_epoch": 0}, {"sched_epoch": 9}) == [1, 3, 4, 9]
    lines[1].pop("scheduler_steps")
    assert positions(lines, {"sched_epoch": 0}, None) == [None, None, None, None]


def _files(folder, later_start, later_count):
    (folder / "run.json").write_text(json.dumps(run_json()))
    for stem, pid, started, lines, start, end in (
            ("rank0", 50, 100.0, _lines(MADE), EARLIER["start"], EARLIER["end"]),
            ("rank0-p60", 60, 200.0, _lines(later_count, step0=12), later_start,
             _standing(12 + later_count))):
        (folder / f"{stem}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
        (folder / f"{stem}.json").write_text(json.dumps(process_json(
            pid=pid, started=started, start=start, end=end)))


def test_the_timeline_continues_from_the_restore_point_and_says_what_was_trained_twice(
        tmp_path):
    _files(tmp_path, _standing(12), 12)
    run = read_folder(tmp_path)
    assert len(run.records) == 24  # 12 of the first process, 12 of the second
    assert [r["opt_step"] for r in run.records] == [float(k + 1) for k in range(24)]
    assert [r["samples_seen"] for r in run.records] == [4 * (k + 1) for k in range(24)]
    (boundary,) = run.boundaries
    assert (boundary.update, boundary.ended) == (12, MADE)
    found = check_continuation("candidate", run.boundaries)
    assert found.status == "pass", found.detail
    assert found.detail.startswith(
        "rank 0's 2 processes joined into one timeline; updates 12-13 were trained twice: the "
        "resume restored the checkpoint of update 11, the first process had made 14 updates "
        "(its updates after update 11 are left out of the comparison); at update 12 the second "
        "process (pid 60) resumed: the weights, the optimizer's state (step counter 12), the "
        "schedule (step 12) carried")


def test_a_resume_from_an_earlier_checkpoint_with_a_fresh_scheduler_fails_there(tmp_path):
    _files(tmp_path, _standing(12, epoch=0), 12)
    found = check_continuation("candidate", read_folder(tmp_path).boundaries)
    assert found.status == "fail" and found.first_divergence == 12
    assert "updates 12-13 were trained twice" in found.detail
    assert ("the second process (pid 60) restarted the schedule at update 12: its step counter "
            "was 0, the first process's was 12 after update 11") in found.detail


def test_a_resume_that_lost_its_optimizer_state_is_placed_by_its_schedule_and_fails(tmp_path):
    _files(tmp_path, {"opt_step": 0.0, "sched_epoch": 8, "fingerprint": [8.0, 1.0]}, 12)
    run = read_folder(tmp_path)
    assert len(run.records) == 20
    found = check_continuation("candidate", run.boundaries)
    assert found.status == "fail" and found.first_divergence == 8
    assert "updates 8-13 were trained twice: the resume restored the checkpoint of update 7" \
        in found.detail
    assert ("lost the optimizer's state at update 8: its step counter was 0 (a fresh optimizer, "
            "or its state_dict not loaded), the first process's was 8 after update 7"
            in found.detail)


def test_a_killed_process_whose_description_is_older_than_its_last_update_is_read_by_its_lines():
    """Killed before its description at exit: its ``end`` is where its first update stood; a
    resume from its last update's checkpoint joins there, judged by the lines' standing."""
    stale = {**EARLIER, "end": _standing(0, fp=[0.0, 1.0])}
    restored = restore_point(_lines(MADE), stale, {"start": _standing(MADE)})
    assert restored.at == MADE and restored.standing == {**_standing(MADE), "sched_epoch": None}
    assert restore_point(_lines(MADE), stale, {"start": _standing(12)}).standing == _standing(12)


def _fed(lines, first):
    """Each update fed its own 4 samples (ids 4k..4k+3), in two micro-batches, from ``first``."""
    for k, line in enumerate(lines):
        ids = list(range(4 * (first + k), 4 * (first + k + 1)))
        line["fed"] = [ids[:2], ids[2:]]
    return lines


def test_a_resume_that_restored_neither_optimizer_nor_schedule_is_placed_by_its_data():
    lost = {"opt_step": 0.0, "sched_epoch": 0, "fingerprint": [9.0, 9.0]}
    restored = restore_point(_fed(_lines(MADE), 0), EARLIER, {"start": lost},
                             _fed(_lines(1), 8)[0])
    assert restored.at == 8 and restored.standing["opt_step"] == 8.0
    # its data from the start: a new stage on the same data, not a resume; unknown data: its end
    assert restore_point(_fed(_lines(MADE), 0), EARLIER, {"start": lost},
                         _fed(_lines(1), 0)[0]).at == MADE
    assert restore_point(_lines(MADE), EARLIER, {"start": lost}, _lines(1)[0]).at == MADE


def test_a_resume_placed_by_its_data_fails_naming_what_it_lost(tmp_path):
    lost = {"opt_step": 0.0, "sched_epoch": 0, "fingerprint": [9.0, 9.0]}
    (tmp_path / "run.json").write_text(json.dumps(run_json()))
    for stem, pid, started, lines, start, end in (
            ("rank0", 50, 100.0, _fed(_lines(MADE), 0), EARLIER["start"], EARLIER["end"]),
            ("rank0-p60", 60, 200.0, _fed(_lines(6), 8), lost, _standing(6))):
        (tmp_path / f"{stem}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
        (tmp_path / f"{stem}.json").write_text(json.dumps(process_json(
            pid=pid, started=started, start=start, end=end)))
    found = check_continuation("candidate", read_folder(tmp_path).boundaries)
    assert found.status == "fail" and found.first_divergence == 8, found.detail
    assert "updates 8-13 were trained twice" in found.detail
    assert "restarted the schedule at update 8: its step counter was 0" in found.detail
    assert "lost the optimizer's state at update 8" in found.detail


def _drawing(lines, prints):
    return [{**line, "rng": p} for line, p in zip(lines, prints, strict=True)]


def test_torchs_rng_is_compared_at_the_restored_update_where_it_moved_at_every_update():
    """The interrupted process's RNG at update 12's step against the resumed process's at its
    first: judged only where the earlier process drew from it at every update (dropout)."""
    drew = _drawing(_lines(MADE), range(100, 100 + MADE))
    restored = restore_point(drew, EARLIER, {"start": _standing(12)}, {"rng": 7})
    assert restored.standing == {**_standing(12), "rng": 112}
    assert restored.start == {**_standing(12), "rng": 7}
    found = check_continuation("candidate", [Boundary(12, 9, 1, restored.standing,
                                                      restored.start, ended=MADE)])
    assert found.status == "fail" and found.first_divergence == 12
    assert ("the second process (pid 9) drew update 12 from another torch RNG stream: its "
            "RNG's state at update 12's step was not the one the first process had there (the "
            "RNG's state not restored from the checkpoint") in found.detail
    same = restore_point(drew, EARLIER, {"start": _standing(12)}, {"rng": 112})
    ok = check_continuation("candidate", [Boundary(12, 9, 1, same.standing, same.start,
                                                   ended=MADE)])
    assert ok.status == "pass" and "torch's RNG stream carried" in ok.detail
    rare = _drawing(_lines(MADE), [100] * 8 + [101] * (MADE - 8))  # drawn at an epoch's edge
    assert "rng" not in restore_point(rare, EARLIER, {"start": _standing(12)},
                                      {"rng": 7}).standing
    at_end = restore_point(drew, EARLIER, {"start": _standing(MADE)}, {"rng": 7})
    assert at_end.at == MADE and "rng" not in (at_end.standing or {})  # update 14 not made


def test_numpys_and_pythons_streams_are_judged_as_torchs_each_where_it_moved_at_every_update():
    """Each global RNG on its own: NumPy's and Python's ``random``'s drawn at every update
    (an augmentation), torch's never (no dropout): the two that moved are judged at the
    restored update, named together where neither was restored; torch's, which never moved,
    is not judged."""
    drew = [{**line, "rng": 5, "rng_numpy": 200 + k, "rng_python": 300 + k}
            for k, line in enumerate(_lines(MADE))]
    lost = restore_point(drew, EARLIER, {"start": _standing(12)},
                         {"rng": 5, "rng_numpy": 7, "rng_python": 8})
    assert lost.standing == {**_standing(12), "rng_numpy": 212, "rng_python": 312}
    found = check_continuation("candidate", [Boundary(12, 9, 1, lost.standing, lost.start,
                                                      ended=MADE)])
    assert found.status == "fail" and found.first_divergence == 12
    assert ("the second process (pid 9) drew update 12 from another NumPy RNG stream and "
            "another Python random stream: their states at update 12's step were not the ones "
            "the first process had there") in found.detail
    half = restore_point(drew, EARLIER, {"start": _standing(12)},
                         {"rng": 5, "rng_numpy": 212, "rng_python": 8})
    found = check_continuation("candidate", [Boundary(12, 9, 1, half.standing, half.start,
                                                      ended=MADE)])
    assert "from another Python random stream: its RNG's state" in found.detail
    assert "NumPy" not in found.detail
    kept = restore_point(drew, EARLIER, {"start": _standing(12)},
                         {"rng": 6, "rng_numpy": 212, "rng_python": 312})
    ok = check_continuation("candidate", [Boundary(12, 9, 1, kept.standing, kept.start,
                                                   ended=MADE)])
    assert ok.status == "pass" and ("NumPy's global RNG stream, Python's random stream "
                                    "carried") in ok.detail and "torch" not in ok.detail


def _cut_folder(tmp_path, carried, fed_again):
    """An earlier process stopped after 1 of update 6's 2 backward passes (its ``cut``: samples
    24-25 fed), and a later one that joins at update 6 with ``carried`` tensors' gradients,
    feeding that window from its start (``fed_again``) or its second micro-batch only."""
    (tmp_path / "run.json").write_text(json.dumps(run_json()))
    cut = {"update": 6, "backward": 1, "fed": [[24, 25]]}
    later = _fed(_lines(2), 6)
    if not fed_again:
        later[0].update(fed=[[26, 27]], backward=1, reached=1)
    for stem, pid, started, lines, start, end in (
            ("rank0", 50, 100.0, _fed(_lines(6), 0), EARLIER["start"],
             {**_standing(6), "cut": cut}),
            ("rank0-p60", 60, 200.0, later, {**_standing(6), "carried_gradients": carried},
             _standing(8))):
        (tmp_path / f"{stem}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
        (tmp_path / f"{stem}.json").write_text(json.dumps(process_json(
            pid=pid, started=started, start=start, end=end)))
    return read_folder(tmp_path)


def test_a_window_continued_with_its_carried_gradients_is_joined_whole(tmp_path):
    """The later process began with the cut window's gradients and fed only the micro-batch
    the earlier one had not: update 6 is the whole window (the earlier process's micro-batch
    first, its weights unknown, its backward pass counted), and the resume passes, the window
    said continued."""
    run = _cut_folder(tmp_path, 4, fed_again=False)
    assert run.records[6]["fed"] == [[0, [24, 25], None], [0, [26, 27], None]]
    assert run.records[6]["backward"] == 2 and run.records[6]["reached"] == 2
    found = check_continuation("candidate", run.boundaries)
    assert found.status == "pass", found.detail
    assert ("update 6's window, continued (the gradients of the 1 backward pass made into it "
            "before the interrupt, in 4 tensors' .grad) carried") in found.detail


@pytest.mark.parametrize(("carried", "fed_again", "fed"), [
    (0, False, [[26, 27]]),  # no gradients carried: data finds samples 24-25 missing
    (4, True, [[24, 25], [26, 27]])])  # fed again from its start: continuation's fed_twice
def test_a_window_not_continued_is_left_as_the_later_process_fed_it(tmp_path, carried,
                                                                   fed_again, fed):
    run = _cut_folder(tmp_path, carried, fed_again)
    assert [ids for _, ids, _ in run.records[6]["fed"]] == fed
    assert "continued" not in run.boundaries[0].after
