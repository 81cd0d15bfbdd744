"""``record.folder``: a record folder's ranks merged into one run."""

import json

import numpy as np
import pytest

from lrcheck.errors import SpecError
from lrcheck.record.folder import merge, rank_schedules, read_folder
from tests.schema_files import optimizer_json, process_json, run_json


def _line(k, fp):
    return {"step": k, "samples_seen": k + 1, "lr": [0.1], "loss": None, "fingerprint": fp,
            "grad_sq": 1.0}


def test_shards_merge_by_summing_sums_and_maxing_peaks():
    ranks = [[_line(0, [1.0, 2.0, 3.0, 0.5])], [_line(0, [4.0, 1.0, -1.0, 0.7])]]
    merged, gap = merge(ranks, sharded=True)
    assert merged[0]["fingerprint"] == [5.0, 2.0, 2.0, 0.7]
    assert merged[0]["grad_sq"] == 2.0 and gap is None


def test_shards_of_unequal_shapes_merge_to_totals():
    ranks = [[_line(0, [1.0, 2.0])], [_line(0, [4.0, 1.0, -1.0, 3.0])]]
    merged, _ = merge(ranks, sharded=True)
    assert merged[0]["fingerprint"] == [4.0, 3.0]


def test_zero_partitions_merge_to_the_whole_model_even_on_one_rank():
    two = [[_line(0, [1.0, 2.0])], [_line(0, [4.0, 3.0])]]
    assert merge(two, sharded=True, partitioned=True)[0][0]["fingerprint"] == [5.0, 3.0]
    one = [[_line(0, [1.0, 2.0, -3.0, 0.5])]]
    assert merge(one, sharded=True, partitioned=True)[0][0]["fingerprint"] == [-2.0, 2.0]


def test_a_partitioned_run_is_compared_with_the_other_runs_whole_model(tmp_path):
    from lrcheck.record.sides import read_sides

    for name, fp, partitioned in (("ref", [1.0, 2.0, 3.0, 0.5], False),
                                  ("zero", [4.0, 2.0], True)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "rank0.jsonl").write_text(json.dumps(_line(0, fp)) + "\n")
        (tmp_path / name / "run.json").write_text(json.dumps(run_json(processes=[process_json(
            optimizers=[optimizer_json(sharded=partitioned, partitioned=partitioned)])])))
    ref, cand = (side.trace for side in read_sides(tmp_path / "ref", tmp_path / "zero"))
    assert ref.fingerprints[0].tolist() == cand.fingerprints[0].tolist() == [[4.0, 2.0]]


def test_replicas_are_checked_against_rank_0_at_every_fingerprinted_update():
    ranks = [[_line(0, [1.0, 2.0]), _line(1, None), _line(2, [1.0, 2.0])],
             [_line(0, [1.5, 2.0]), _line(1, None), _line(2, [1.0, 2.0])],
             [_line(0, [1.0, 2.0]), _line(1, None), _line(2, [2.0, 2.0])]]
    merged, gaps = merge(ranks, sharded=False)
    assert merged[0]["fingerprint"] == [1.0, 2.0]
    assert gaps is not None and [(g.gap, g.update, g.rank) for g in gaps] == [(0.25, 0, 1),
                                                                               (0.5, 2, 2)]
    same = merge([ranks[0], ranks[0]], sharded=False)[1]
    assert same is not None and np.isclose(max(g.gap for g in same), 0.0)
    assert merge([ranks[0]], sharded=False)[1] is None


def _rank_line(k, lr, steps):
    return {"step": k, "samples_seen": k + 1, "lr": [lr], "loss": None, "scheduler_steps": steps}


def test_every_ranks_schedule_is_kept_beside_rank_0s_records():
    ranks = [[_rank_line(k, 0.001 * (k + 1), 1) for k in range(3)],
             [_rank_line(k, 0.001, 1 if k == 0 else 0) for k in range(4)]]
    merged, _ = merge(ranks, sharded=False)
    assert [r["lr"] for r in merged] == [[0.001], [0.002], [0.003]]  # rank 0's, unbloated
    assert all(set(r) == set(ranks[0][0]) for r in merged)
    found = rank_schedules(ranks)
    assert found is not None and [a.shape for a in found.lrs] == [(3, 1), (3, 1)]
    assert found.lrs[1][:, 0].tolist() == [0.001] * 3
    assert [s.tolist() for s in found.steps] == [[1, 1, 1], [1, 0, 0]]
    assert rank_schedules(ranks[:1]) is None
    uncounted = [[{**line, "scheduler_steps": 0} for line in ranks[0]],
                 [{k: v for k, v in line.items() if k != "scheduler_steps"} for line in ranks[1]]]
    assert rank_schedules(uncounted).steps[1] is None


def test_a_folder_whose_rank_1_did_not_step_its_scheduler_fails_ranks(tmp_path):
    from lrcheck.command_pair import diff_runs

    warmup = [_rank_line(k, 0.001 * (k + 1), 1) for k in range(4)]
    stuck = [_rank_line(k, 0.001, int(k == 0)) for k in range(4)]  # only its initial step
    for name, rank1 in (("ref", warmup), ("bug", stuck)):
        folder = tmp_path / name
        folder.mkdir()
        for rank, lines in enumerate((warmup, rank1)):
            (folder / f"rank{rank}.jsonl").write_text("".join(json.dumps(x) + "\n"
                                                              for x in lines))
        (folder / "run.json").write_text(json.dumps(run_json(
            world_size=2, updates={"rank0.jsonl": 4, "rank1.jsonl": 4})))
    checks = {c.name: c for c in diff_runs(tmp_path / "ref", tmp_path / "bug").checks}
    assert checks["ranks (reference)"].status == "pass"
    assert checks["lr"].status == "pass"  # rank 0's LR is the reference's
    bug = checks["ranks (candidate)"]
    assert bug.status == "fail" and bug.first_divergence == 1
    assert bug.detail.startswith("rank 1's LR differs from rank 0's from update 1 (0.001 on "
                                 "rank 1, 0.002 on rank 0): its scheduler did not step")


def test_a_folder_without_run_json_or_updates_is_bad_input(tmp_path):
    with pytest.raises(SpecError, match="not a record folder"):
        read_folder(tmp_path)
    (tmp_path / "run.json").write_text(json.dumps(run_json()))
    with pytest.raises(SpecError, match=r"the command \(exit code 0\) made no optimizer update"):
        read_folder(tmp_path)


def _record(folder, updates, **about):
    folder.mkdir()
    lines = [{"step": k, "samples_seen": k + 1, "lr": [0.1], "loss": 1.0} for k in range(updates)]
    (folder / "rank0.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (folder / "run.json").write_text(json.dumps(run_json(updates={"rank0.jsonl": updates},
                                                         **about)))


@pytest.mark.parametrize(("about", "words"), [
    ({"exit_code": 7, "ended": "exit code 7"}, "ended with exit code 7"),
    ({"exit_code": -9, "ended": "killed by SIGKILL"}, "was killed by SIGKILL"),
    ({"exit_code": -2, "ended": "killed by SIGINT", "interrupted": True},
     "was interrupted (killed by SIGINT)"),
])
def test_a_record_whose_command_crashed_fails_updates_as_incomplete(tmp_path, about, words):
    from lrcheck.command_pair import diff_runs

    _record(tmp_path / "ref", 5)
    _record(tmp_path / "ended-well", 5)
    _record(tmp_path / "crashed", 5, **about)
    assert diff_runs(tmp_path / "ref", tmp_path / "ended-well").verdict == "pass"
    report = diff_runs(tmp_path / "ref", tmp_path / "crashed")
    updates = next(c for c in report.checks if c.name == "updates")
    print(updates.detail)
    assert report.verdict == "fail" and updates.status == "fail"
    assert updates.detail.startswith(f"the candidate's command {words} after 5 updates: its "
                                     "record is incomplete")


def test_a_rank_file_that_run_json_lists_and_is_missing_is_named(tmp_path):
    _record(tmp_path / "r", 5)
    (tmp_path / "r" / "rank0.jsonl").unlink()
    with pytest.raises(SpecError) as caught:
        read_folder(tmp_path / "r")
    print(caught.value)
    assert "rank0.jsonl, which its run.json lists with 5 update(s), is missing" in str(
        caught.value) and "made no optimizer update" not in str(caught.value)


def test_a_ranks_failure_is_a_cause_that_spares_the_twin():
    from types import SimpleNamespace

    from lrcheck.checks.status import FAIL, PASS, CheckResult
    from lrcheck.command_pair import _needs_twin
    from lrcheck.plan.judging import recorded_judging

    params = CheckResult("params", FAIL, 0.1, 2, "|Δsum|/max|p| 0.0151 > 0.0001 at update 2")
    lr = CheckResult("lr", PASS, 0.0, None, "equal at all 32 updates")
    ranks = CheckResult("ranks (candidate)", FAIL, 0.001, 1, "rank 1's LR differs …")
    free = recorded_judging(None, free="recorded apart")
    assert _needs_twin(SimpleNamespace(checks=[lr, params]), free)
    assert not _needs_twin(SimpleNamespace(checks=[lr, params, ranks]), free)
    later = CheckResult("ranks (candidate)", FAIL, 0.001, 5, "rank 1's LR differs …")
    assert _needs_twin(SimpleNamespace(checks=[lr, params, later]), free)  # the effect first


def _process_files(folder, stem, pid, started, records, start, end):
    (folder / f"{stem}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (folder / f"{stem}.json").write_text(json.dumps(process_json(
        pid=pid, started=started, start=start, end=end)))


def test_a_ranks_processes_are_joined_in_the_order_they_started_not_by_pid(tmp_path):
    """A resume in one command: the second process (a smaller pid, started later) continues
    the first's updates and samples; where it joined is kept with where each stood."""
    first = {"opt_step": 0.0, "sched_epoch": 0, "fingerprint": [1.0, 1.0]}
    middle = {"opt_step": 2.0, "sched_epoch": 2, "fingerprint": [2.0, 2.0]}
    _process_files(tmp_path, "rank0", 900, 100.0, [_line(0, None), _line(1, None)], first,
                   middle)
    _process_files(tmp_path, "rank0-p12", 12, 200.0, [_line(0, None), _line(1, None),
                                                      _line(2, None)], middle, None)
    (tmp_path / "run.json").write_text(json.dumps(run_json()))
    run = read_folder(tmp_path)
    assert [(r["step"], r["samples_seen"]) for r in run.records] == [(k, k + 1) for k in range(5)]
    (boundary,) = run.boundaries
    assert (boundary.update, boundary.pid, boundary.order) == (2, 12, 1)
    assert boundary.before == boundary.after == middle


def test_a_second_process_that_started_first_comes_first(tmp_path):
    _process_files(tmp_path, "rank0", 5, 300.0, [{**_line(0, None), "lr": [0.2]}], None, None)
    _process_files(tmp_path, "rank0-p6", 6, 100.0, [_line(0, None)], None, None)
    (tmp_path / "run.json").write_text(json.dumps(run_json()))
    run = read_folder(tmp_path)
    assert [r["lr"] for r in run.records] == [[0.1], [0.2]]
    assert run.boundaries[0].pid == 5


def test_only_the_updates_judged_free_running_may_need_the_twin():
    from types import SimpleNamespace

    from lrcheck.checks.status import FAIL, CheckResult
    from lrcheck.command_pair import _needs_twin
    from lrcheck.plan.judging import recorded_judging

    params = CheckResult("params", FAIL, 0.1, 2, "|Δsum|/max|p| 0.0151 > 0.0001 at update 2")
    report = SimpleNamespace(checks=[params])
    assert not _needs_twin(report, recorded_judging(range(12)))  # in lockstep throughout
    assert _needs_twin(report, recorded_judging([0, 1], "states differ"))  # free from 2
    assert not _needs_twin(report, recorded_judging([0, 1, 2], "states differ"))  # lockstep's
    optimizer = CheckResult("optimizer", FAIL, None, 0, "momentum 0 against 0.9")
    assert not _needs_twin(SimpleNamespace(checks=[params, optimizer]),
                           recorded_judging([0], "states differ"))  # a cause explains it
