"""``lrcheck trace``: check a schedule without a model."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from lrcheck.cli.ending import noted
from lrcheck.cli.options import (
    DEFAULT,
    JsonOpt,
    LrOpt,
    PolicyOpt,
    QuietOpt,
    SchedulerOpt,
    TailOpt,
    TolLrOpt,
    WarmupOpt,
    choices,
    out_option,
)
from lrcheck.cli.output import (
    DEFAULT_REPORTS,
    Output,
    ProgressBar,
    plots,
    prepared,
    save_and_show,
    saving_incomplete,
)
from lrcheck.spec import (
    TRACE_DEFAULTS,
    CompareOptions,
    Optimizer,
    PairSpec,
    ToleranceOverrides,
    reference_framework,
)


def trace_command(
    samples: Annotated[int, typer.Option(help="Training samples per epoch (the whole data set of the run being checked).")],
    accum: Annotated[int, typer.Option(help="Micro-batches per optimizer update.")] = TRACE_DEFAULTS.accum,
    bs: Annotated[int, typer.Option(help="Micro-batch size per process.")] = TRACE_DEFAULTS.bs,
    nproc: Annotated[int, typer.Option(help="Processes (world size); arithmetic only, none is started.")] = DEFAULT.world,
    ref_bs: Annotated[int | None, typer.Option(help="The reference's batch size (accum 1); bs·accum·nproc must equal ref_bs·ref_nproc. [default: bs·accum·nproc / ref_nproc]")] = None,
    ref_nproc: Annotated[int, typer.Option(help="The reference's processes.")] = 1,
    epochs: Annotated[int, typer.Option(help="Epochs over --samples.")] = TRACE_DEFAULTS.epochs,
    scheduler: SchedulerOpt = DEFAULT.scheduler,
    warmup: WarmupOpt = DEFAULT.warmup,
    lr: LrOpt = DEFAULT.lr,
    optimizer: Annotated[Optimizer, typer.Option(help=f"Optimizer whose param groups the schedule drives: {choices(Optimizer)}.")] = DEFAULT.optimizer,
    policy: PolicyOpt = DEFAULT.policy,
    tail: TailOpt = DEFAULT.tail,
    tol_lr: TolLrOpt = None,
    out: Annotated[Path | None, out_option("Report folder. [default: ./lrcheck-reports/trace-<pair name>]")] = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Check a schedule without a model, for runs too large to train: step the candidate's and
    the reference's schedules exactly as the training loop would (world size is arithmetic, no
    process starts) and check `updates` and `lr`.

    Exit codes: 0 the schedules match, 1 they do not, 2 bad input, 3 a schedule crashed,
    130 interrupted (what was simulated is saved with verdict "incomplete").
    """
    pair = noted(lambda: CompareOptions(replace(
        TRACE_DEFAULTS, bs=bs, accum=accum, epochs=epochs, world=nproc, scheduler=scheduler,
        warmup=warmup, lr=lr, optimizer=optimizer, policy=policy, tail=tail, samples=samples),
        ref_bs=ref_bs, ref_world=ref_nproc, ref_framework=reference_framework(policy, None),
        tolerances=ToleranceOverrides(lr=tol_lr)).pair())
    output = Output(json=json_out, quiet=quiet)
    with output.running():
        code = _trace(pair, out, output)
    raise typer.Exit(code)


def _trace(pair: PairSpec, out: Path | None, output: Output) -> int:
    """Step both schedules with a progress bar, save the report and show it; the exit code."""
    from lrcheck.api import trace_schedule

    output.starting("building the schedules")
    with (prepared(pair, out, create=True,
                   default=DEFAULT_REPORTS / f"trace-{_schedule_name(pair)}") as folder,
          plots(True) as renderer):
        with saving_incomplete(folder, output), ProgressBar(output.progress) as bar:
            report = trace_schedule(pair, progress=bar.update)
        save_and_show(report, folder, renderer, output)
    return report.exit_code


def _schedule_name(pair: PairSpec) -> str:
    """The pair's name without the task, which a trace does not have."""
    return pair.name.removeprefix(f"{pair.candidate.task}-")
