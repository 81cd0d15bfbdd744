"""What several commands share: the flags' defaults (the library's, so that ``lrcheck.compare()``
and a suite's ``[[pair]]`` run what the command runs when told nothing) and their options."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

import typer

from lrcheck.errors import SpecError
from lrcheck.experiments.schedulers import SCHEDULERS
from lrcheck.plan.policies import POLICIES
from lrcheck.spec import RunSpec, Tail
from lrcheck.spec.settings import SETTINGS_BY_NAME

DEFAULT = RunSpec()


def choices(names: Iterable[str]) -> str:
    return ", ".join(names)


SchedulerOpt = Annotated[str, typer.Option(help=f"LR schedule: {choices(SCHEDULERS)}, or a factory 'pkg.module:make' / 'path/to/file.py:make' called as make(optimizer, ctx).")]
WarmupOpt = Annotated[float, typer.Option(help="Warmup as a fraction of the run, in [0, 1).")]
LrOpt = Annotated[float, typer.Option(help="Base (peak) learning rate.")]
PolicyOpt = Annotated[str, typer.Option(help=f"How lrcheck's own loop (--framework plain) steps the candidate's schedule: {choices(POLICIES)}. The reference always runs per-update. ('accelerate', the old spelling, is --framework accelerate --ref-framework plain.)")]
TailOpt = Annotated[Tail, typer.Option(help=f"Samples left over at an epoch's end: {choices(Tail)}.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print result.json to stdout instead of the tables.")]
TolLrOpt = Annotated[float | None, typer.Option(help="lr check: |ΔLR| ≤ tol·max(1, |LR|). [default: 1e-12]")]
DeterministicOpt = Annotated[bool, typer.Option("--deterministic", help="Apply the settings GPU training needs to be repeatable, as torchtitan's set_determinism does: CUBLAS_WORKSPACE_CONFIG, NCCL's algorithm, protocol and channels fixed, PYTHONHASHSEED (in the environment, before CUDA and NCCL start), deterministic algorithms (warn only), cuDNN deterministic without benchmark, TF32 and reduced-precision reductions off (once torch is imported); each recorded in result.json's environment (on a CPU the CUDA ones say not applicable). See docs/checks.md, \"Deterministic runs\".")]
TagOpt = Annotated[list[str] | None, typer.Option("--tag", metavar="QUANTITY=TAG", help="Which logged tag holds a quantity, over lrcheck's table of names (docs/logs.md, \"Tags\"): lr, loss, grad_norm or samples = the tag, e.g. --tag lr=LearningRate --tag loss=Loss/train. Repeat for each.")]
LogStepsOpt = Annotated[str | None, typer.Option("--log-steps", metavar="CONVENTION", help="What a logged step counts, over what is detected or inferred (docs/logs.md, \"What a step means\"): updates-from-0, updates-from-1, micro-batches[:N] or samples[:N] (N per update; with a recording it may be left out).")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar and no tables: only the verdict line.")]


def setting_option(name: str) -> object:
    """The option of a framework's setting, as ``spec/settings.py`` declares it: its flag (a
    switch's) and its help."""
    setting = SETTINGS_BY_NAME[name]
    return typer.Option(*setting.param_decls, help=setting.help)


def _out_folder(text: str) -> Path:
    """``reports.files.out_folder``, imported only when ``--out`` is given (it needs numpy)."""
    from lrcheck.reports.files import out_folder

    return out_folder(text)


def out_option(help: str) -> object:
    """``--out DIR``; an empty name is refused while the flags are read."""
    return typer.Option(help=help, metavar="DIR", parser=_out_folder)


def parse_updates(flag: str, text: str) -> tuple[int, ...]:
    """``"3,7"`` → ``(3, 7)``: update numbers given on the command line."""
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise SpecError(f"{flag} takes update numbers separated by commas, such as 3,7; "
                        f"got {text!r}") from None
