"""``--deterministic`` applied (the settings: ``spec.determinism.DETERMINISM``): in lrcheck's own
runs for the length of one run (``applied``: ``runner.local.run_local``, so in this process, in
torchrun's ranks and in a suite's ``--jobs`` workers alike), and in a recorded command's
processes once they import torch (``apply_flags``: ``record.startup``).

Environment variables are set here only where the process has not set them, and stay set; the
processes lrcheck starts get them in their environment from the start
(``spec.determinism.environment``: ``runner.ranks.launch``, ``record.launch``)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from lrcheck.spec.determinism import DETERMINISM, ENV_VARIABLES, FLAGS, described

# What only a process's start reads: set in the environment of the processes lrcheck starts.
AT_START = {s.name for s in DETERMINISM if s.needs == "start"}

_USE = "torch.use_deterministic_algorithms"
_PRECISION = "torch.set_float32_matmul_precision"
# Set after CUDA started in this process, cuBLAS may keep the workspace it has.
LATE = ("(set after CUDA started in this process, for an earlier run: cuBLAS may keep the "
        "workspace it chose then)")


def _attribute(name: str) -> tuple[object, str]:
    """The object and attribute a dotted flag name (``torch.backends.cudnn.benchmark``) sets
    (``torch.backends.cuda.matmul`` is an object, not a module: walked from ``torch``)."""
    import torch

    *path, attribute = name.split(".")
    owner: object = torch
    for part in path[1:]:
        owner = getattr(owner, part)
    return owner, attribute


def read(name: str) -> object:
    """The value flag ``name`` has now (for ``torch.use_deterministic_algorithms``: whether
    deterministic algorithms are on)."""
    import torch

    if name == _USE:
        return torch.are_deterministic_algorithms_enabled()
    if name == _PRECISION:
        return torch.get_float32_matmul_precision()
    owner, attribute = _attribute(name)
    return getattr(owner, attribute)


def _write(name: str, value: object, warn_only: bool = True) -> None:
    import torch

    if name == _USE:
        torch.use_deterministic_algorithms(bool(value), warn_only=warn_only)
    elif name == _PRECISION:
        torch.set_float32_matmul_precision(str(value))
    else:
        owner, attribute = _attribute(name)
        setattr(owner, attribute, value)


def in_effect(world: int) -> dict[str, object]:
    """What a recorded process's description says of ``--deterministic`` (``rank{R}.json``):
    each setting as in effect now, read back (a flag the command's own code changed after
    lrcheck set it, or an environment variable it set, shows with lrcheck's value beside it);
    the CUDA ones apply once the process has started CUDA."""
    import torch

    device = "cuda" if torch.cuda.is_initialized() else "cpu"
    return described(device, world, os.environ, started=True, read=read)


def described_here(device: str, world: int) -> dict[str, object]:
    """What result.json's ``environment.deterministic`` says of a run of lrcheck's own on
    ``device`` in this process, before it trains: its environment variables set (and left set:
    ``applied``), each flag as ``applied`` leaves it, read back (one held otherwise, such as TF32
    under ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1``, shows with lrcheck's value beside it).
    ``CUBLAS_WORKSPACE_CONFIG`` set only now, after CUDA started here (a suite's earlier pair
    used it), says that cuBLAS may keep the workspace it chose then."""
    import torch

    late = "CUBLAS_WORKSPACE_CONFIG" in set_environment() and torch.cuda.is_initialized()
    before = apply_flags()
    try:
        entry = described(device, world, os.environ, read=read)
    finally:
        restore_flags(before)
    if late and device == "cuda":
        entry["CUBLAS_WORKSPACE_CONFIG"] = f"{entry['CUBLAS_WORKSPACE_CONFIG']} {LATE}"
    return entry


def apply_flags() -> dict[str, object]:
    """Every flag set to its ``DETERMINISM`` value; returns what each was before (and whether
    deterministic algorithms only warned), for ``restore_flags``."""
    import torch

    before = {s.name: read(s.name) for s in FLAGS}
    before["warn_only"] = torch.is_deterministic_algorithms_warn_only_enabled()
    for setting in FLAGS:
        _write(setting.name, setting.value)
    return before


def restore_flags(before: dict[str, object]) -> None:
    for setting in FLAGS:
        _write(setting.name, before[setting.name], warn_only=bool(before["warn_only"]))


def set_environment() -> list[str]:
    """The environment variables this process does not set, set (for good: they are read when
    a library starts, and a later run in this process finds them there); their names. Not
    ``PYTHONHASHSEED``: only a process's start reads it (the processes lrcheck starts have it
    from theirs)."""
    added = [name for name in ENV_VARIABLES if name not in os.environ and name not in AT_START]
    os.environ.update({name: ENV_VARIABLES[name] for name in added})
    return added


@contextlib.contextmanager
def applied(on: bool) -> Iterator[None]:
    """With ``on``: the environment variables this process does not set (``set_environment``)
    and every flag for the block, then the flags as they were. Without: nothing. What takes
    effect is what ``described_here`` reads back."""
    if not on:
        yield
        return
    set_environment()
    before = apply_flags()
    try:
        yield
    finally:
        restore_flags(before)
