"""``record.worlds``: a resume on another world size, the timeline cut into segments each
merged over the ranks that ran it (through ``record.folder.read_folder``)."""

import json

from lrcheck.record.folder import read_folder
from tests.schema_files import process_json, run_json


def _line(k, fp):
    return {"step": k, "samples_seen": k + 1, "lr": [0.1], "loss": None, "fingerprint": fp,
            "grad_sq": 1.0, "scheduler_steps": 1, "opt_step": float(k + 1)}


def _process(folder, stem, started, lines, world, rank=0, start=None, end=None):
    (folder / f"{stem}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    (folder / f"{stem}.json").write_text(json.dumps(process_json(
        pid=started, rank=rank, world=world, started=started, start=start, end=end)))


def _at(k):
    return {"opt_step": float(k), "sched_epoch": k, "fingerprint": [1.0, 1.0]}


def test_two_ranks_resumed_on_one_process_join_past_rank_1s_interrupt(tmp_path):
    """Rank 1's timeline ends at the interrupt (after update 3): the resumed process, which
    restored the checkpoint of update 1, carries the run on alone from update 2."""
    _process(tmp_path, "rank0", 100, [_line(k, [1.0, 1.0]) for k in range(4)], 2,
             start=_at(0), end=_at(4))
    _process(tmp_path, "rank1", 101, [_line(k, [1.0 + (k == 0) / 1024, 1.0])
                                      for k in range(4)], 2, rank=1, start=_at(0), end=_at(4))
    _process(tmp_path, "rank0-p7", 200, [_line(k, [2.0, 1.0]) for k in range(3)], 1,
             start=_at(2), end=_at(5))
    (tmp_path / "run.json").write_text(json.dumps(run_json()))
    run = read_folder(tmp_path)
    assert len(run.records) == 5 and run.ranks == 2
    assert [r["fingerprint"] for r in run.records] == [[1.0, 1.0]] * 2 + [[2.0, 1.0]] * 3
    (boundary,) = run.boundaries
    assert (boundary.update, boundary.worlds, boundary.ended) == (2, (2, 1), 4)
    assert [g.update for g in run.replicas] == [0, 1] and run.replicas[0].gap == 1 / 1024
    assert run.schedules is not None and run.schedules.lrs[1].shape == (2, 1)  # rank 1's two


def test_one_process_resumed_on_two_ranks_merges_both_from_the_resume(tmp_path):
    _process(tmp_path, "rank0", 100, [_line(k, [1.0, 1.0]) for k in range(2)], 1,
             start=_at(0), end=_at(2))
    for rank in (0, 1):
        _process(tmp_path, f"rank{rank}-p{7 + rank}" if rank == 0 else "rank1", 200 + rank,
                 [_line(k, [2.0, 1.0 + rank]) for k in range(3)], 2, rank=rank,
                 start=_at(2), end=_at(5))
    (tmp_path / "run.json").write_text(json.dumps(run_json()))
    run = read_folder(tmp_path)
    assert len(run.records) == 5 and run.boundaries[0].worlds == (1, 2)
    assert [g.update for g in run.replicas] == [2, 3, 4]  # the replicas compared from the resume
    assert run.schedules is None  # no rank but rank 0 ran from the first update


def test_sharded_weights_are_not_compared_where_the_world_size_changed(tmp_path):
    from lrcheck.record.worlds import at_world_change
    from lrcheck.stepwise import Boundary

    b = Boundary(2, 7, 1, _at(2), _at(2), worlds=(2, 1))
    (same,) = at_world_change([b], sharded=False)
    assert same == b
    (shard,) = at_world_change([b], sharded=True)
    assert shard.before["fingerprint"] is None and shard.after["fingerprint"] is None
    assert shard.before["opt_step"] == 2.0
    kept = Boundary(2, 7, 1, _at(2), _at(2), worlds=(2, 2))
    assert at_world_change([kept], sharded=True) == (kept,)
