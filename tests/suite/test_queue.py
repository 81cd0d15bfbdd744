"""The order in which ``--jobs`` workers get a suite's pairs: one pair per task; a shared reference
trained once, by the first of its pairs, the others waiting for it and then running anywhere;
a pair that ends without it leaving the next to try; cores counted; traces dropped at the end."""

from __future__ import annotations

from lrcheck.suite.queue import PairQueue
from lrcheck.suite.spec import Suite, parse_suite


def suite(pairs: list[dict[str, object]]) -> Suite:
    return parse_suite({"defaults": {"task": "wine", "epochs": 2}, "pair": pairs}, "ci.toml")


# Two groups: a, b, c train like bs 16 (one reference), d and e like bs 8 (another).
FIVE = suite([{"name": "a", "bs": 8, "accum": 2}, {"name": "b", "bs": 4, "accum": 4},
              {"name": "d", "bs": 4, "accum": 2}, {"name": "c", "bs": 2, "accum": 8},
              {"name": "e", "bs": 2, "accum": 4}])


def name(queue: PairQueue, index: int | None) -> str | None:
    return None if index is None else queue.suite.entries[index].name


def reference(queue: PairQueue, index: int) -> object:
    return queue.suite.entries[index].pair.reference


def test_each_groups_first_pair_trains_its_reference_and_the_others_wait_for_it():
    queue = PairQueue(FIVE, 4)
    first, second = queue.take(4), queue.take(4)
    assert {name(queue, first), name(queue, second)} == {"a", "d"}  # each group's first pair
    assert queue.given(first) == {} and queue.given(second) == {}
    assert queue.take(4) is None  # b, c and e wait for their group's reference
    a = first if name(queue, first) == "a" else second
    queue.trained(a, reference(queue, a), b"the reference")
    # The costlier of b (bs 4 x 4) and c (bs 2 x 8) first; each is given the trained reference.
    third = queue.take(4)
    assert name(queue, third) == "c"
    assert queue.given(third) == {reference(queue, a): b"the reference"}
    assert name(queue, queue.take(4)) == "b"
    assert queue.take(4) is None  # e still waits for d's reference


def test_a_pair_that_ends_without_its_reference_leaves_the_next_in_the_file_to_train_it():
    queue = PairQueue(FIVE, 1)
    a = queue.take(1)
    assert name(queue, a) == "a"
    queue.ended(a)  # it crashed before its reference had trained
    second = queue.take(1)
    assert name(queue, second) == "d"  # the other group's first pair: before the rest
    queue.ended(second)
    # Each group's next pair in the file tries again (as a sequential run would): b, not the
    # costlier c; and e, as d's group has no running trainer either.
    retries = [queue.take(1), queue.take(1)]
    assert {name(queue, i) for i in retries} == {"b", "e"}
    assert all(queue.given(i) == {} for i in retries)
    assert queue.take(1) is None  # c waits for b's reference


def test_the_pair_that_trains_a_reference_waits_for_its_cores_and_the_others_for_it():
    wide_first = suite([{"name": "wide", "bs": 8, "accum": 2, "nproc": 2},
                        {"name": "narrow", "bs": 16, "accum": 2}])  # both: bs 32 on 1 process
    queue = PairQueue(wide_first, 2)
    assert queue.take(1) is None  # wide trains the reference (in its torchrun job): not narrow
    wide = queue.take(2)
    assert name(queue, wide) == "wide" and queue.shares(wide)
    queue.trained(wide, reference(queue, wide), b"ref")
    narrow = queue.take(1)
    assert name(queue, narrow) == "narrow" and not queue.shares(narrow)  # nothing left after


def test_a_noise_floor_twin_is_passed_on_and_a_groups_traces_dropped_when_it_ends():
    queue = PairQueue(FIVE, 2)
    a, d = queue.take(2), queue.take(2)
    ref = reference(queue, a)
    twin = ref.replace(twin=True)
    queue.trained(a, ref, b"ref")
    queue.trained(a, twin, b"twin")
    assert queue.given(queue.take(2)) == {ref: b"ref", twin: b"twin"}
    for index in range(len(FIVE.entries)):
        if reference(queue, index) == ref:
            queue.ended(index)
    assert ref not in queue.traces  # the group's last pair ended
    queue.trained(d, reference(queue, d), b"other")
    assert reference(queue, d) in queue.traces


def test_a_multi_process_pair_counts_its_processes_and_waits_for_them():
    two = suite([{"name": "wide", "bs": 8, "accum": 2, "nproc": 2},
                 {"name": "narrow", "bs": 4, "accum": 2}])
    queue = PairQueue(two, 3)
    assert [queue.cores(i) for i in range(2)] == [2, 1]
    assert name(queue, queue.take(1)) == "narrow"  # wide does not fit on one free core
    assert name(queue, queue.take(2)) == "wide"
    assert PairQueue(two, 1).cores(0) == 1  # a pair counts at most every job


def test_pairs_of_commands_never_wait():
    commands = suite([{"name": f"c{i}", "ref_command": "python a.py", "command": "python b.py",
                       "samples_per_update": 32} for i in range(2)]
                     + [{"name": "x", "bs": 8, "accum": 2}])
    queue = PairQueue(commands, 3)
    taken = {name(queue, queue.take(3)) for _ in range(3)}
    assert taken == {"c0", "c1", "x"} and queue.take(3) is None and not queue.todo


def test_a_pair_put_back_is_next_again_and_its_reference_no_longer_on_its_way():
    queue = PairQueue(FIVE, 4)
    first = queue.take(4)
    assert name(queue, first) == "a" and queue.training == {reference(queue, first)}
    queue.put_back(first)
    assert queue.training == set() and name(queue, queue.take(4)) == "a"
    assert name(queue, queue.take(4)) == "d" and queue.take(4) is None
