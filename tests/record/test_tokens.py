"""Each token's weight ∂L/∂logp_t (``record.tokens``): measured from the gradient reaching the
log-probs, a row's real tokens whatever its padding, and their Recorder form read back."""

import json

import numpy as np
import pytest
import torch

from lrcheck.errors import SpecError
from lrcheck.record import tokens


def test_the_gradient_reaching_the_log_probs_is_each_tokens_weight_summed_over_backwards():
    leaf = torch.tensor([-1.0, -2.0, -3.0, -0.5, -0.5, -0.5], requires_grad=True)
    flat = leaf * 1.0  # the log-probs, as TRL's head returns them: flat, in the graph
    grads: list[torch.Tensor] = []
    assert tokens.watch(grads, flat, rows=2)
    weights = torch.tensor([[0.0, 0.25, 0.25], [0.0, 0.5, 0.125]])
    (flat.reshape(2, 3) * weights).sum().backward(retain_graph=True)
    (flat.reshape(2, 3) * weights).sum().backward()  # a second pass adds, as gradients accumulate
    assert grads[0].dtype == torch.float64
    np.testing.assert_array_equal(grads[0].numpy(), 2 * weights.numpy())


def test_a_micro_batch_scored_twice_leaves_its_tokens_unmeasured():
    leaf = torch.ones(4, requires_grad=True)
    first, second = leaf * 1.0, leaf * 2.0
    grads: list[torch.Tensor] = []
    assert tokens.watch(grads, first, rows=2)
    assert not tokens.watch(grads, second, rows=2) and grads == []
    (first.sum() + second.sum()).backward()
    assert grads == []  # neither hook wrote: which tokens each scored is not known


def test_log_probs_that_do_not_divide_into_the_rows_are_not_watched():
    assert not tokens.watch([], torch.zeros(5, requires_grad=True), rows=2)


def test_a_rows_tokens_are_its_real_positions_after_its_first_whatever_the_padding():
    # One row, left-padded by 2 in one run, right-padded by 1 in the other: 3 real tokens, of
    # which the 2 after the first are predicted; the shifted log-probs hold width - 1 positions.
    mask_left = torch.tensor([[0, 0, 1, 1, 1]])
    mask_right = torch.tensor([[1, 1, 1, 0]])
    a = tokens.rows(torch.tensor([[0.0, 0.0, 0.1, 0.2]], dtype=torch.float64), mask_left)
    b = tokens.rows(torch.tensor([[0.1, 0.2, 0.0]], dtype=torch.float64), mask_right)
    np.testing.assert_array_equal(a[0].numpy(), [0.1, 0.2])
    np.testing.assert_array_equal(b[0].numpy(), [0.1, 0.2])


def test_without_a_fitting_mask_every_position_is_a_token():
    grads = torch.arange(6, dtype=torch.float64).reshape(2, 3)
    assert [r.tolist() for r in tokens.rows(grads, None)] == [[0, 1, 2], [3, 4, 5]]


def test_the_recorder_form_reads_back_exactly():
    measured = [[[0.1, -1 / 3], [], [2.0 ** -40]], None, []]
    uses = {"logp − x": [[0.1, 0.0], [], [0.0]], "x − logp": [[0.0, -1 / 3], [], [2.0 ** -40]]}
    back = tokens.read(tokens.pack(measured, [uses, None, None]), 3, "line 1")
    assert back[1] is None and back[2] == ([], None)
    assert [r.tolist() for r in back[0][0]] == measured[0]
    assert {k: [r.tolist() for r in v] for k, v in back[0][1].items()} == uses


@pytest.mark.parametrize("bad", [[["x", "AA=="]], [[[1], "not base64!"]], [[[2], "AAAAAAAAAAA="]],
                                 "text"])
def test_a_malformed_fed_tokens_names_its_line(bad):
    with pytest.raises(SpecError, match="line 7: 'fed_tokens'"):
        tokens.read(bad, len(bad) if isinstance(bad, list) else 1, "line 7")


def test_fed_tokens_for_another_number_of_micro_batches_is_refused():
    with pytest.raises(SpecError, match="per micro-batch of 'fed'"):
        tokens.read(tokens.pack([None, None]), 3, "line 2")


def test_two_ranks_token_weights_reach_the_traces_windows_beside_their_rows(tmp_path):
    from lrcheck.record.folder import merge
    from lrcheck.recorder import pack_fed, read_records
    from lrcheck.trace import RunTrace

    def line(rank: int) -> dict:
        rows = [[0.0, -0.25 * (rank + 1)], [0.5]]
        return {"step": 0, "samples_seen": 1, "lr": [0.1], "loss": None,
                **pack_fed([[10 + rank, 20 + rank]], [[0.25, 0.5]]),
                "fed_tokens": tokens.pack([rows])}

    lines = []
    for rank in (0, 1):
        path = tmp_path / f"rank{rank}.jsonl"
        path.write_text(json.dumps(line(rank)) + "\n")
        lines.extend(read_records(path))
    merged, _ = merge([[lines[0]], [lines[1]]], sharded=False)
    window = RunTrace.from_records(merged, "file").windows[0]
    assert [m.rank for m in window] == [0, 1]
    assert [r.tolist() for r in window[1].token_weights] == [[0.0, -0.5], [0.5]]
    # a rank without them: no tokens for any (the update's tokens are all or nothing)
    bare = {k: v for k, v in lines[1].items() if k != "fed_tokens"}
    merged, _ = merge([[lines[0]], [bare]], sharded=False)
    assert all(m.token_weights is None for m in RunTrace.from_records(merged, "f").windows[0])


def test_what_a_grpo_candidate_held_equal_is_read_from_its_ranks_counts(tmp_path):
    assert tokens.read_held(tmp_path) is None  # no GRPO generation recorded
    (tmp_path / "rollouts-rank0.json").write_text(json.dumps({"replayed": 3, "generated": 0}))
    (tmp_path / "rollouts-rank1.json").write_text(json.dumps({"replayed": 3, "generated": 0}))
    said = tokens.read_held(tmp_path)
    assert said and said.startswith("the rollouts held equal: 6 of the candidate's 6 generation")
    assert "generated itself" not in said
    (tmp_path / "rollouts-rank1.json").write_text(json.dumps({"replayed": 1, "generated": 2}))
    said = tokens.read_held(tmp_path)
    assert said and "4 of the candidate's 6" in said and "; 2 it generated itself" in said
    (tmp_path / "rollouts-rank0.json").write_text("{not json")
    (tmp_path / "rollouts-rank1.json").write_text(json.dumps({"replayed": "x", "generated": -1}))
    assert tokens.read_held(tmp_path) is None  # unreadable or nonsense counts say nothing
