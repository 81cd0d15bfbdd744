"""The checks (docs/design.md, "The checks and their tolerances") as pure functions: (reference
trace, candidate trace, tolerances) → results. Nothing here trains, prints or writes.

The causes (``causes``: updates, data, weights, skipped steps; ``lr``) are checked exactly per
update; the effects (``effects``: params, loss, metrics) against the training's own noise;
``contract`` runs them all in the contract's order, ``recorded`` those of ``lrcheck diff``.
"""

from lrcheck.checks.causes import (
    WEIGHT_RTOL,
    check_data,
    check_skipped_steps,
    check_updates,
    check_weights,
    not_comparable_reason,
    skipped_updates,
)
from lrcheck.checks.contract import SIMULATED, run_checks, schedule_checks
from lrcheck.checks.effects import (
    DECORRELATED,
    FLOOR_FACTOR,
    JUMP_FACTOR,
    LOSS_SCALE_FLOOR,
    PARAM_CHUNK,
    check_effect,
    check_loss,
    check_metrics,
    check_params,
    jump_or_drift,
    loss_gap,
    loss_scale,
    needs_floor,
    params_gap,
)
from lrcheck.checks.lr import check_lr, lr_offset, offset_text, schedule_pace
from lrcheck.checks.recorded import (
    align,
    check_aligned_updates,
    check_fingerprints,
    recorded_checks,
)
from lrcheck.checks.status import CHECK_NAMES, FAIL, PASS, SKIP, WARN, CheckResult, Status, verdict

__all__ = [
    "CHECK_NAMES", "DECORRELATED", "FAIL", "FLOOR_FACTOR", "JUMP_FACTOR", "LOSS_SCALE_FLOOR",
    "PARAM_CHUNK", "PASS", "SIMULATED", "SKIP", "WARN", "WEIGHT_RTOL", "CheckResult", "Status",
    "align", "check_aligned_updates", "check_data", "check_effect", "check_fingerprints",
    "check_loss", "check_lr", "check_metrics", "check_params", "check_skipped_steps",
    "check_updates", "check_weights", "jump_or_drift", "loss_gap", "loss_scale", "lr_offset",
    "needs_floor", "not_comparable_reason", "offset_text", "params_gap", "recorded_checks",
    "run_checks", "schedule_checks", "schedule_pace", "skipped_updates", "verdict",
]
