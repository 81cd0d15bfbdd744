"""``logs.shards``: a logged gradient norm of a run of several ranks held against the true
global norm merged from their shards and against each rank's own, on hand-built merged lines
(``grad_sq``, ``grad_sq_ranks``, after the clip) and hand-built logs: the global norm said,
one rank's local norm named with its ratio, before or after the clip."""

import math
from pathlib import Path

import numpy as np

from lrcheck.logs.model import LogFormat, LoggedRun, Quantity, Series, StepMeaning
from lrcheck.logs.shards import rank_norms
from lrcheck.logs.truth import DIFFERS, hold

MAX_NORM = 0.5
# Per update, each of 4 ranks' squares of its own shards before the clip (FSDP2: every
# tensor sharded, each rank about a quarter of the whole).
SHARDS = [[1.0 + 0.1 * k, 0.9, 1.1 - 0.05 * k, 1.0] for k in range(4)]


def _records():
    out = []
    for k, squares in enumerate(SHARDS):
        norm = math.sqrt(sum(squares))  # the true global norm, the run clipped with
        coef = min(1.0, MAX_NORM / (norm + 1e-6))
        out.append({"step": k, "samples_seen": k + 1, "lr": [1e-3], "clip_grad_norm": 1,
                    "clip_norm": norm, "max_norm": MAX_NORM, "grad_sq": sum(squares) * coef ** 2,
                    "grad_sq_ranks": [q * coef ** 2 for q in squares]})
    return out


def _norm_finding(values):
    series = Series(Quantity.GRAD_NORM, "grad_norm", tuple(range(len(values))),
                    tuple(float(v) for v in values), "float64")
    log = LoggedRun(Path("history.csv"), LogFormat.CSV, {Quantity.GRAD_NORM: series},
                    StepMeaning(first=0, how="detected: steps count updates from 0"))
    (finding,) = hold(log, _records(), "candidate")
    return finding


def test_each_ranks_local_norm_is_read_from_the_merged_lines():
    found = rank_norms(_records())
    assert found.shape == (4, 4)
    coef = MAX_NORM / (math.sqrt(sum(SHARDS[0])) + 1e-6)
    assert math.isclose(found[0, 2], math.sqrt(SHARDS[0][2]) * coef, rel_tol=1e-15)


def test_one_rank_alone_gives_no_local_norms():
    assert rank_norms([{"grad_sq_ranks": [1.0]}, {}]).shape == (2, 0)


def test_the_true_global_norm_logged_is_said_to_be_it():
    found = _norm_finding([math.sqrt(sum(q)) for q in SHARDS])
    assert found.says.startswith("the logged grad norm is the pre-clip norm"), found.says
    assert "the true global norm, merged from the 4 ranks' shards, each once" in found.says


def test_rank_0s_local_norm_logged_is_named_with_its_ratio_to_the_true_norm():
    found = _norm_finding([math.sqrt(q[0]) for q in SHARDS])
    assert (found.status, found.first_update) == (DIFFERS, 0)
    ratio = math.sqrt(SHARDS[0][0] / sum(SHARDS[0]))  # 0.488: about 1/√4
    assert found.says.startswith(
        f"the logged grad norm is rank 0's local norm before clipping, of the shards it holds, "
        f"not reduced over the 4 ranks: {ratio:.3f}× the true global norm at update 0, about "
        f"1/√4 (a sharded norm's local value"), found.says


def test_a_ranks_local_norm_after_the_clip_is_named_too():
    records = _records()
    found = _norm_finding([math.sqrt(r["grad_sq_ranks"][3]) for r in records])
    assert found.says.startswith("the logged grad norm is rank 3's local norm after clipping"), \
        found.says


def test_a_norm_that_is_no_ranks_is_not_named_a_local_one():
    found = _norm_finding(np.sqrt([q[0] for q in SHARDS]) * 1.3)
    assert found.status is DIFFERS and "local norm" not in found.says, found.says
