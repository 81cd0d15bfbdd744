"""``lrcheck diff``: check your own training from two files written by ``lrcheck.Recorder``,
two record folders, or two runs' own logs (docs/logs.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lrcheck.cli.options import JsonOpt, LogStepsOpt, TagOpt, TolLrOpt, out_option
from lrcheck.cli.output import DEFAULT_REPORTS, Output
from lrcheck.spec import DIFF_DTYPE, Tolerances


def diff_command(
    reference: Annotated[Path, typer.Argument(help="The reference run: a file written by lrcheck.Recorder, a record folder, or its logs (a TensorBoard, Trainer, Lightning or MLflow log, or a folder holding one).", show_default=False)],
    candidate: Annotated[Path, typer.Argument(help="The candidate run, as the reference.", show_default=False)],
    tol_lr: TolLrOpt = None,
    tol_loss: Annotated[float | None, typer.Option(help="loss check: |Δloss| / |loss| per update. [default: 1e-3, float32's; a file does not say its dtype]")] = None,
    out: Annotated[Path | None, out_option("Report folder. [default: ./lrcheck-reports/diff-<candidate>-vs-<reference>]")] = None,
    json_out: JsonOpt = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No tables: only the verdict line.")] = False,
    tag: TagOpt = None,
    log_steps: LogStepsOpt = None,
) -> None:
    """Check your own training: compare two files written by lrcheck.Recorder (one JSON line per
    optimizer update) or two record folders, aligned by samples seen, and check `updates`, `lr`
    and `loss`.

    Two runs' own logs compare too (told apart by their content): TensorBoard events, a Trainer's
    trainer_state.json, Lightning's metrics.csv, an MLflow store, or a folder holding one (its
    newest run is read). The LR is checked exactly at every update both logged, the loss and
    the gradient norm as drift or a jump; tags only one run logged and what a log cannot prove
    are listed (docs/logs.md). `--tag` says which tag is which where lrcheck does not know
    the names; `--log-steps` what a logged step counts.

    Exit codes: 0 the runs match, 1 they do not, 2 bad input (a missing file, a malformed line).
    """
    from lrcheck.api import diff, save_report

    tolerances = Tolerances.for_dtype(DIFF_DTYPE, lr=tol_lr, loss=tol_loss)
    output = Output(json=json_out, quiet=quiet)
    with output.running():
        report = diff(reference, candidate, tolerances=tolerances, tags=tag, log_steps=log_steps)
        saved = save_report(report, out if out is not None
                            else DEFAULT_REPORTS / f"diff-{report.pair.name}")
        output.show(report, saved)
    raise typer.Exit(report.exit_code)
