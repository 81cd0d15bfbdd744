"""What lockstep measures per tensor at each update (``gaps``): how far the candidate's gradient
and parameters are from the reference's, both having started the update from the same state.
Pure tensor arithmetic, no files: ``record.lockstep`` calls it in the candidate's process, after
the user's own update, so its cost is paid on every update of the user's training.

Its cost is mostly memory traffic. The differences are taken in the tensors' own type (two
values this close subtract exactly, Sterbenz), and every sum is accumulated in two levels
(``total``): blocks of ``BLOCK`` consecutive terms summed in float32 at least (torch's cascade
sum, whose error is a few units of float32's roundoff of the block's Σ|term|), the blocks' sums
in float64. That is as exact as summing every term in float64 (each term, a float32 product, is
already rounded at that level) at a fifth of its cost: a float64 sum of float32 terms converts
every term on its way."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from lrcheck.record import exchange

# A coordinate's gradient is rounding noise where it is at most this many units of the compute
# precision's roundoff of its tensor's largest (at most ``NOISE_CAP`` of it) and the runs do not
# share it (they differ by ``UNSHARED`` of it or more): the key-bias slice of a fused qkv
# projection, whose exact gradient is 0.
NOISE_UNITS, NOISE_CAP, UNSHARED = 64, 1e-2, 0.1
BLOCK = 1024  # terms summed in float32 before their sum joins the float64 total

_UP = torch.tensor(float("inf"))


def _blocks(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``t`` flattened as whole blocks of ``BLOCK`` terms (rows) and the rest."""
    flat = t.reshape(-1)
    whole = flat.numel() - flat.numel() % BLOCK
    return flat[:whole].view(-1, BLOCK), flat[whole:]


def total(t: torch.Tensor) -> float:
    """Σ t: in float64 where ``t`` is; else by blocks of ``BLOCK`` in float32, the blocks' sums in
    float64 (the module's docstring says why)."""
    if t.dtype == torch.float64 or t.numel() <= BLOCK:
        return float(torch.sum(t, dtype=torch.float64))
    rows, rest = _blocks(t)
    sums = torch.sum(rows, dim=1, dtype=torch.float32)
    return float(torch.sum(sums, dtype=torch.float64) + torch.sum(rest, dtype=torch.float64))


def norm(t: torch.Tensor) -> float:
    """‖t‖, the blocks' norms combined in float64; in float64 throughout where a block's norm
    leaves float32's range (or ``t`` is float64)."""
    if t.dtype == torch.float64 or t.numel() <= BLOCK:
        return float(torch.linalg.vector_norm(t, dtype=torch.float64))
    rows, rest = _blocks(t)
    parts = torch.linalg.vector_norm(rows, dim=1, dtype=torch.float32).double()
    found = math.sqrt(float(torch.sum(parts * parts))
                      + float(torch.linalg.vector_norm(rest, dtype=torch.float64)) ** 2)
    return found if math.isfinite(found) else float(torch.linalg.vector_norm(
        t, dtype=torch.float64))


def dot(a: torch.Tensor, b: torch.Tensor) -> float:
    """<a, b>: the products in the tensors' own type (one temporary, no float64 copies),
    summed by ``total``."""
    return total(a * b)


def along(diff: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """Σ sign(ref_i)·Δ_i and Σ |ref_i|: their ratio is the mean of the coordinates' relative
    gaps Δ_i / ref_i weighted by |ref_i|, exactly s where Δ = s·ref, and where each
    coordinate's rounding is its own it averages out over many more coordinates than
    <Δ, ref> / ‖ref‖² (which a few of the largest carry); a coordinate near 0 weighs little."""
    return dot(torch.sign(ref), diff), total(torch.abs(ref))


def noise(gap: torch.Tensor, size: torch.Tensor, share: float) -> torch.Tensor | None:
    """The coordinates whose gradient is rounding noise (``NOISE_UNITS``), from the runs' gap
    and the reference's |g|: at most ``share`` of the tensor's largest and unshared by the
    runs; None where there is none. The small coordinates are found first: most tensors have
    none, or none the runs do not share."""
    if not share or not size.is_floating_point() or not size.numel():
        return None
    low = size <= share * torch.max(size)
    if not int(torch.count_nonzero(low)):
        return None
    gap = torch.abs(gap)
    found = low & (gap >= UNSHARED * size) & (gap > 0)
    return found if int(torch.count_nonzero(found)) else None


def _grads(g_c: torch.Tensor, g_r: torch.Tensor, share: float, whole: bool
           ) -> tuple[tuple[float, ...], torch.Tensor | None]:
    """‖g_c − g_r‖, ‖g_r‖, <g_c − g_r, g_r>, ``along``'s two, and the coordinates of rounding
    noise (``whole``: the gradient has the parameter's shape), each difference taken once."""
    gap, size = g_c - g_r, torch.abs(g_r)
    found = noise(gap, size, share) if whole else None
    sign = torch.sign(g_r)
    if found is not None:
        sign, size = sign.masked_fill_(found, 0), size.masked_fill_(found, 0)
    return (norm(gap), norm(g_r), dot(gap, g_r), dot(sign, gap), total(size)), found


def gaps(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor | None],
         ref_params: Sequence[torch.Tensor], start: Sequence[torch.Tensor],
         share: float = 0.0) -> list[list[float]]:
    """The ``stepwise.COLUMNS`` of each tensor at this update, rounded to 4 significant digits:
    the candidate's ``params`` (their ``.grad`` the update used) against the reference's
    ``grads`` and ``ref_params``, both updates having started from ``start``. The parameters'
    columns and the gradient's ``along`` leave out the coordinates whose gradient is rounding
    noise (``noise``), counted in their column."""
    rows = []
    with torch.no_grad():
        for p, g_r, p_r, p_0 in zip(params, grads, ref_params, start, strict=True):
            mine = p.detach().to("cpu")
            g_c = None if p.grad is None else exchange.dense(p.grad.detach()).to("cpu")
            found = None
            grad: tuple[float, ...]
            if g_r is None or g_c is None:
                gd = norm(g_c) if g_c is not None else norm(g_r) if g_r is not None else 0.0
                grad = (gd, 0.0 if g_r is None else norm(g_r), 0.0, 0.0, 0.0)
            else:
                grad, found = _grads(g_c, g_r, share, g_c.shape == p_r.shape)
            moved, update = mine - p_r, p_r - p_0
            ulp = torch.nextafter(p_r, _UP.to(p_r.dtype)).sub_(p_r) \
                if p_r.is_floating_point() and p_r.numel() else torch.zeros(())
            if found is not None:
                moved, update, ulp = (t.masked_fill_(found, 0) for t in (moved, update, ulp))
            rows.append([float(f"{v:.4g}") for v in (
                *grad[:2], norm(moved), norm(update), norm(ulp), grad[2], dot(moved, update),
                0 if found is None else int(found.sum()), *grad[3:], *along(moved, update))])
    return rows
