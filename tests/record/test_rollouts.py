"""GRPO's rollouts replayed (``record.rollouts``): the reference's generation batch, written
whole, read back by each candidate rank as its slice of the rows; nothing replayed where the
rows do not divide into the candidate's, or the reference ended without writing."""

import torch

from lrcheck.record import rollouts
from lrcheck.record.roles import REFERENCE, ended


def _batch() -> dict[str, object]:
    rows = torch.arange(8).reshape(8, 1)
    return {"prompt_ids": rows, "completion_ids": rows * 10, "advantages": rows[:, 0] * 0.5,
            "num_items_in_batch": torch.tensor(37), "not a tensor": [1, 2]}


def test_each_rank_replays_its_slice_of_the_references_rows(tmp_path):
    rollouts.written(tmp_path, 0, _batch())
    got = rollouts.replayed(tmp_path, 0, (1, 2, 4), torch.device("cpu"))
    assert got is not None and set(got) == {"prompt_ids", "completion_ids", "advantages",
                                            "num_items_in_batch"}
    assert got["prompt_ids"][:, 0].tolist() == [4, 5, 6, 7]
    assert got["completion_ids"][:, 0].tolist() == [40, 50, 60, 70]
    assert got["advantages"].tolist() == [2.0, 2.5, 3.0, 3.5]
    assert int(got["num_items_in_batch"]) == 37  # the window's count, whole: not sliced
    whole = rollouts.replayed(tmp_path, 0, (0, 1, 8), torch.device("cpu"))
    assert whole is not None and whole["prompt_ids"][:, 0].tolist() == list(range(8))


def test_rows_that_do_not_divide_into_the_candidates_are_not_replayed(tmp_path):
    rollouts.written(tmp_path, 3, _batch())
    assert rollouts.replayed(tmp_path, 3, (0, 2, 3), torch.device("cpu")) is None


def test_a_reference_that_ended_without_writing_releases_the_wait(tmp_path):
    ended(tmp_path, REFERENCE).touch()
    assert rollouts.replayed(tmp_path, 0, (0, 2, 4), torch.device("cpu")) is None


def test_a_reference_on_several_processes_says_it_wrote_none(tmp_path):
    (tmp_path / "rollout-2.none").touch()  # what its rank 0 leaves in place of its rows
    assert rollouts.replayed(tmp_path, 2, (0, 2, 4), torch.device("cpu")) is None


def test_a_one_process_candidate_takes_the_rng_as_the_references_generation_left_it(tmp_path):
    """TRL shuffles the generation batch (``torch.randperm``) before splitting it into updates:
    the candidate, which did not generate, shuffles as the reference did; a rank of several
    keeps its own RNG."""
    torch.manual_seed(1)
    rollouts.written(tmp_path, 0, _batch())
    shuffled = torch.randperm(16).tolist()  # the reference's shuffle, after its generation
    torch.manual_seed(2)
    got = rollouts.replayed(tmp_path, 0, (0, 1, 8), torch.device("cpu"))
    assert got is not None and rollouts.RNG not in got
    assert torch.randperm(16).tolist() == shuffled
    torch.manual_seed(2)
    own = torch.randperm(16).tolist()
    torch.manual_seed(2)
    assert rollouts.replayed(tmp_path, 0, (1, 2, 4), torch.device("cpu")) is not None
    assert torch.randperm(16).tolist() == own != shuffled
