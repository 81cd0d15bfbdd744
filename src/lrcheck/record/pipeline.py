"""Which pipeline stage a recorded process's optimizer steps, found without the user's code
handing it over: the ``torch.distributed.pipelining`` stage (``PipelineStage``, and the
stages ``pipeline()`` builds) alive in the process whose module holds the optimizer's
parameters; its index and the number of stages (``record.staged`` stitches the stages' records
into the whole model's)."""

from __future__ import annotations

import gc
import sys
from collections.abc import Sequence

import torch

_MODULE = "torch.distributed.pipelining.stage"
# Why a pipeline stage's samples have no loss weights (``record.taps``): not measured, said so.
STAGE_WHY = ("a pipeline stage: the loss is computed on the last stage, from activations, not "
             "on the rows stage 0 fed, so no sample's weight is measured")


def stage_of(params: Sequence[torch.Tensor]) -> tuple[int, int, list[str], bool] | None:
    """The pipeline stage whose module holds ``params``: its index, the number of stages, each
    parameter's name in the stage's module (``tensor {i}`` where not its) and whether those
    names are the whole model's paths (a stage ``pipeline()`` split off keeps each parameter
    under its path in the model traced: a name two stages hold is one parameter; a
    ``PipelineStage`` of the user's module names them as that module does); None where
    pipelining is not imported, or no stage holds them."""
    base = getattr(sys.modules.get(_MODULE), "_PipelineStageBase", None)
    if not isinstance(base, type) or not params:
        return None
    for obj in gc.get_objects():
        if not issubclass(type(obj), base):  # not isinstance: no __class__ property read
            continue
        module = getattr(obj, "submod", None)
        if not isinstance(module, torch.nn.Module):
            continue
        known = {id(p): name for name, p in module.named_parameters()}
        if id(params[0]) in known:
            return (int(getattr(obj, "stage_index", 0)), int(getattr(obj, "num_stages", 1)),
                    [known.get(id(p), f"tensor {i}") for i, p in enumerate(params)],
                    getattr(obj, "pipe_info", None) is not None)
    return None
