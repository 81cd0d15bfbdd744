"""The groups an expert-parallel run's gradient norm is kept in (the experts, the router, the
rest: ``record.experts`` by name, ``record.placed`` by an ``ep`` placement) and the router's
gradient per term merged over the ranks (``record.router``'s ``router_terms``): data only, no
torch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

# A replicated tensor whose name has one of these parts is the router's (torchtitan's
# ``moe.router.gate``, Mixtral's ``block_sparse_moe.gate``, Qwen2-MoE's ``mlp.gate``).
ROUTER_PARTS = ("router", "gate")
GROUPS = ("experts", "router", "rest")


def group_of(name: str, holders: int, ranks: int) -> str:
    """Which of ``GROUPS`` the tensor ``name`` is in, held by ``holders`` of the ``ranks``."""
    if holders < ranks:
        return "experts"
    return "router" if any(p in ROUTER_PARTS for p in name.split(".")) else "rest"


def router_terms(lines: Sequence[Mapping[str, object]]) -> dict[str, object]:
    """``router_terms`` of the whole run (``record.router``): each term's squared norm summed
    over the ranks, each rank's own tokens' rows, divided by the ranks squared (the replicated
    router's gradient is the ranks' mean); None (rank 0's dropped) unless every rank measured
    the same terms; none where no rank measured any."""
    found = [line.get("router_terms") for line in lines]
    if not any(found):
        return {}
    read = [terms_of(f) for f in found]
    first = read[0]
    if first is None or not all(f is not None and set(f) == set(first) for f in read):
        return {"router_terms": None}
    return {"router_terms": {t: sum(f[t] for f in read if f is not None) / len(lines) ** 2
                             for t in first}}


def terms_of(found: object) -> dict[str, float] | None:
    """A record's ``router_terms``: a number ≥ 0 per term (None: not recorded, or not so)."""
    if not isinstance(found, dict) or not found or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
            for v in found.values()):
        return None
    return {str(t): float(v) for t, v in found.items()}
