"""What a recorded process's model is, found without the user's code handing it over: the module
that holds an optimizer's parameters (for their names, as ``named_parameters`` gives them), the
stochastic layers active in training (dropout with p > 0), and a count of the dropout calls
that drew a mask (``torch.nn.functional``'s dropouts with ``training`` and p > 0, which is how
``nn.Dropout`` and most attention code apply it)."""

from __future__ import annotations

import functools
import gc
import os
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

_DROPOUTS = ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
             "feature_alpha_dropout")
# Dropout calls that drew a mask, in this process, since it started.
calls = [0]
# The trainers whose log folders a recorded process notes (``log_folders``): the module that
# defines the class, the class, and the attributes that name the folders, the first the more
# precise (the Trainer's ``logging_dir`` holds its TensorBoard events, its ``output_dir`` the
# ``trainer_state.json`` of each checkpoint; Lightning's ``log_dir`` is its logger's version
# folder, under ``default_root_dir``).
TRAINERS = (("transformers.trainer", "Trainer", ("args.logging_dir", "args.output_dir")),
            ("lightning.pytorch.trainer.trainer", "Trainer", ("log_dir", "default_root_dir")),
            ("pytorch_lightning.trainer.trainer", "Trainer", ("log_dir", "default_root_dir")))


def _counting(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def dropout(input: Any, p: float = 0.5, training: bool = True, *args: Any,
                **kwargs: Any) -> Any:
        if training and p > 0:
            calls[0] += 1
        return fn(input, p, training, *args, **kwargs)

    dropout._lrcheck = True  # type: ignore[attr-defined]
    return dropout


def count_dropout() -> None:
    """Wrap ``torch.nn.functional``'s dropouts so that each call that draws a mask counts."""
    functional: Any = nn.functional
    for name in _DROPOUTS:
        fn = getattr(functional, name, None)
        if fn is not None and not getattr(fn, "_lrcheck", False):
            setattr(functional, name, _counting(fn))


def owner(params: list[torch.Tensor]) -> nn.Module | None:
    """The module that holds the most of ``params`` (of two that hold as many, the one with
    fewer parameters of its own; a wrapper's ``.module``, as DDP's, where it holds as many)."""
    ids = {id(p) for p in params}
    best: tuple[int, int] | None = None
    found: nn.Module | None = None
    for obj in gc.get_objects():
        if not issubclass(type(obj), nn.Module):  # not isinstance: no __class__ property read
            continue
        try:
            mine = [id(p) for p in obj.parameters()]
        except Exception:  # noqa: BLE001 - a half-built module of the user's
            continue
        held = sum(1 for i in mine if i in ids)
        if held and (best is None or (held, -len(mine)) > best):
            best, found = (held, -len(mine)), obj
    inner = getattr(found, "module", None)
    while isinstance(inner, nn.Module) and best is not None and \
            sum(1 for p in inner.parameters() if id(p) in ids) == best[0]:
        found, inner = inner, getattr(inner, "module", None)
    return found


def names(params: list[torch.Tensor], model: nn.Module | None) -> list[str]:
    """Each parameter's name in ``model`` (``named_parameters``), or ``tensor {i}``."""
    known = {} if model is None else {id(p): n for n, p in model.named_parameters()}
    return [known.get(id(p), f"tensor {i}") for i, p in enumerate(params)]


def stochastic(model: nn.Module | None) -> list[dict[str, Any]]:
    """The dropout layers of ``model`` in training mode with p > 0: path, class and p."""
    if model is None:
        return []
    found = []
    for path, module in model.named_modules():
        p = getattr(module, "p", None)
        if isinstance(module, nn.modules.dropout._DropoutNd) and module.training and p:
            found.append({"module": path or type(model).__name__,
                          "kind": type(module).__name__, "p": float(p)})
    return found


def log_folders() -> list[dict[str, str]]:
    """The folders the trainers of ``TRAINERS`` alive in this process log into, made absolute,
    each with its framework; nothing to look for (and no time spent) where none is imported."""
    classes = [(module, found, attrs) for module, name, attrs in TRAINERS
               if (found := getattr(sys.modules.get(module), name, None)) is not None]
    if not classes:
        return []
    folders: list[dict[str, str]] = []
    for obj in gc.get_objects():
        for module, cls, attrs in classes:
            if not (isinstance(cls, type) and issubclass(type(obj), cls)):
                continue
            for attr in attrs:
                value: object = obj
                try:
                    for part in attr.split("."):
                        value = getattr(value, part)
                except Exception:  # noqa: BLE001 - a property of a trainer not yet set up
                    continue
                if isinstance(value, (str, os.PathLike)) and str(value):
                    entry = {"framework": module.split(".")[0], "folder": os.path.abspath(value)}
                    if entry not in folders:
                        folders.append(entry)
    return folders
