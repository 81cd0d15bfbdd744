"""The split of a suite into shards: reference groups kept whole, the same split whatever the
order of the file, balanced by cost, stable as pairs are added; ``--shard k/n`` parsed."""

from __future__ import annotations

import pytest

from lrcheck.errors import SpecError
from lrcheck.suite.shard import (
    SHARD_ENV,
    entry_cost,
    groups,
    parse_shard,
    plan_lines,
    run_cost,
    shard_from,
    shard_of,
    split,
)
from lrcheck.suite.spec import Suite, parse_suite


def grid(schedulers: list[str], splits: list[tuple[int, int]], **extra: object) -> Suite:
    """A pair per scheduler x (bs, accum), every pair of a scheduler sharing its reference."""
    pairs = [{"name": f"{s}-bs{bs}-x{accum}", "scheduler": s, "bs": bs, "accum": accum,
              **extra} for s in schedulers for bs, accum in splits]
    return parse_suite({"defaults": {"task": "digits", "epochs": 2}, "pair": pairs}, "ci.toml")


SPLITS = [(16, 2), (8, 4), (4, 8), (2, 16)]
SUITE = grid(["cosine", "linear", "wsd", "constant", "step"], SPLITS)


def names(suite: Suite, shard: list) -> set[str]:
    return {suite.entries[i].name for g in shard for i in g.indices}


def test_groups_are_the_pairs_that_share_a_reference_and_stay_whole_in_a_shard():
    found = groups(SUITE)
    assert len(found) == 5 and all(len(g.indices) == 4 for g in found)
    for shard in split(SUITE, 3):
        for group in shard:
            schedulers = {SUITE.entries[i].pair.candidate.scheduler for i in group.indices}
            assert len(schedulers) == 1  # one scheduler: one reference
    every = [n for shard in split(SUITE, 3) for n in names(SUITE, shard)]
    assert sorted(every) == sorted(e.name for e in SUITE.entries)  # each pair exactly once


def test_the_split_depends_on_the_pairs_not_on_their_order_in_the_file():
    backwards = Suite("ci.toml", tuple(reversed(SUITE.entries)))
    for count in (1, 2, 3, 4, 7):
        assert ([names(SUITE, s) for s in split(SUITE, count)]
                == [names(backwards, s) for s in split(backwards, count)])
    assert shard_of(SUITE, 2, 3)[1].suite == shard_of(backwards, 2, 3)[1].suite


def test_shards_are_balanced_by_cost_within_the_costliest_group():
    # Groups of very different costs: epochs 1 to 6.
    pairs = [{"name": f"e{e}-{s}", "scheduler": s, "epochs": e, "bs": 8, "accum": 2}
             for e in range(1, 7) for s in ("cosine", "linear")]
    suite = parse_suite({"defaults": {"task": "digits"}, "pair": pairs}, "ci.toml")
    costs = [g.cost for g in groups(suite)]
    for count in (2, 3, 4):
        loads = [sum(g.cost for g in shard) for shard in split(suite, count)]
        assert max(loads) <= sum(costs) / count + max(costs), (count, loads)
        assert max(loads) - min(loads) <= max(costs), (count, loads)


def test_adding_a_cheap_pair_leaves_the_costlier_groups_where_they_were():
    before = split(SUITE, 3)
    cheap = grid(["onecycle"], [(16, 2)], epochs=1)
    after = split(Suite("ci.toml", SUITE.entries + cheap.entries), 3)
    where = {g.key: n for n, shard in enumerate(before) for g in shard}
    assert all(where[g.key] == n for n, shard in enumerate(after) for g in shard
               if g.key in where)


def test_the_cost_counts_micro_batches_and_the_launch_of_several_processes():
    one = SUITE.entries[0].pair.candidate
    assert run_cost(one.replace(bs=8, accum=4)) == 2 * run_cost(one)  # twice the steps
    two = run_cost(one.replace(world=2, bs=8))
    assert two > run_cost(one.replace(bs=8)) / 2 + 1000  # half the steps each, plus a launch
    assert entry_cost(SUITE.entries[0]) == run_cost(one)  # lrcheck's loop: no twin
    assert groups(grid(["cosine"], [(8, 1)], nproc=2))[0].cores == 2


def test_a_twin_is_counted_where_the_pair_is_judged_against_one():
    """The cost follows ``plan.judging.judging_mode``, as the runner does: a framework's pair
    and a pair against another framework's reference count the reference's twin; lrcheck's
    loop in lockstep, ``fast`` and Ludwig (its own model and data order) count none."""
    def cost_of(**settings: object) -> tuple[float, float, float]:
        pair = grid(["cosine"], [(16, 2)], **settings).entries[0]
        return (entry_cost(pair), run_cost(pair.pair.candidate), run_cost(pair.pair.reference))

    for settings in ({"framework": "transformers"}, {"framework": "lightning",
                                                     "ref_framework": "plain"},
                     {"ref_framework": "accelerate"}):
        total, candidate, reference = cost_of(**settings)
        assert total == candidate + reference, settings
    for settings in ({}, {"framework": "transformers", "fast": True}, {"framework": "ludwig"}):
        total, candidate, _ = cost_of(**settings)
        assert total == candidate, settings


def test_a_shard_of_the_suite_keeps_the_file_order_and_records_the_whole_plan():
    part, info = shard_of(SUITE, 2, 3)
    indices = [SUITE.entries.index(e) for e in part.entries]
    assert indices == sorted(indices) and part.path == SUITE.path
    plan = info.to_dict()
    assert (plan["index"], plan["count"]) == (2, 3)
    assert [p["name"] for p in plan["plan"]] == [e.name for e in SUITE.entries]
    assert {p["name"] for p in plan["plan"] if p["shard"] == 2} == {e.name for e in part.entries}


def test_more_shards_than_groups_leaves_some_empty():
    shards = split(grid(["cosine"], SPLITS), 3)
    assert sorted(len(s) for s in shards) == [0, 0, 1]


@pytest.mark.parametrize(("text", "message"), [
    ("3", "expected k/n"), ("0/3", "between 1 and n"), ("4/3", "between 1 and n"),
    ("a/b", "expected k/n"),
])
def test_a_bad_shard_is_refused_in_one_line(text, message):
    with pytest.raises(SpecError, match=message):
        parse_shard(text)


def test_the_shard_comes_from_the_flag_or_else_the_environment(monkeypatch):
    monkeypatch.setenv(SHARD_ENV, "2/4")
    assert shard_from(None) == (2, 4)
    assert shard_from("1/2") == (1, 2)
    monkeypatch.setenv(SHARD_ENV, "5/4")
    with pytest.raises(SpecError, match=r"^\$LRCHECK_SHARD '5/4'"):
        shard_from(None)
    monkeypatch.delenv(SHARD_ENV)
    assert shard_from(None) is None


def test_the_listed_plan_names_every_group_and_marks_the_chosen_shard():
    lines = plan_lines(SUITE, (2, 3))
    assert lines[0] == "ci.toml: 20 pairs in 5 reference groups, cost " + lines[0].split()[-3] \
        + " (micro-batch steps)"
    assert sum(line.startswith("shard ") for line in lines) == 3
    assert sum(line.endswith("← this shard") for line in lines) == 1
    assert sum(line.startswith("  group ") for line in lines) == 5
