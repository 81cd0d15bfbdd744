"""Which device a run uses."""

from __future__ import annotations

from lrcheck.errors import SpecError


def resolve_device(name: str) -> str:
    """``auto`` becomes ``cuda`` when CUDA is there, else ``cpu``; ``cuda`` without CUDA is bad
    input."""
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise SpecError("--device cuda: CUDA is not available on this machine (torch "
                        f"{torch.__version__}); use --device cpu or --device auto")
    return name
