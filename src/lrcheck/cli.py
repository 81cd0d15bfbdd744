"""The command line: flags → specs → library call → render.

Torch, scikit-learn and matplotlib are imported only once a command runs, so ``--help`` is fast.
Library errors become one line on stderr and the exit code of DESIGN.md; a traceback reaching a
user is a bug.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from lrcheck.errors import LrcheckError
from lrcheck.experiments.schedulers import SCHEDULERS
from lrcheck.experiments.tasks import TASKS
from lrcheck.runner.policies import POLICIES
from lrcheck.spec import DEVICES, DTYPES, LOSS_NORMS, OPTIMIZERS, TAILS, PairSpec, RunSpec, Tolerances

DEFAULT_REPORTS = Path("lrcheck-reports")


app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None,
           help="Prove (or disprove) that gradient accumulation and several processes train "
                "exactly like one process with the same effective batch.")


def _choices(names: Any) -> str:
    return ", ".join(names)


def fail(exc: LrcheckError) -> typer.Exit:
    """Print ``exc`` as one line on stderr; the ``typer.Exit`` to raise."""
    Console(stderr=True, highlight=False, soft_wrap=True).print(
        f"[bold red]lrcheck: error:[/] {escape(str(exc))}", markup=True)
    return typer.Exit(exc.exit_code)


@app.command("compare")
def compare_command(
    accum: Annotated[int, typer.Option(help="Micro-batches per optimizer update.")] = 2,
    bs: Annotated[int, typer.Option(help="Micro-batch size: samples one process feeds forward at once.")] = 16,
    ref_bs: Annotated[Optional[int], typer.Option(help="The reference's batch size (accum 1, one process); must equal bs·accum·world. [default: bs·accum·world]")] = None,
    epochs: Annotated[int, typer.Option(help="Epochs over the training split.")] = 5,
    task: Annotated[str, typer.Option(help=f"What is trained: {_choices(TASKS)}.")] = "digits",
    samples: Annotated[int, typer.Option(help="Samples generated for --task synthetic.")] = 2000,
    scheduler: Annotated[str, typer.Option(help=f"LR schedule: {_choices(SCHEDULERS)}, or a factory 'pkg.module:make' / 'path/to/file.py:make' called as make(optimizer, ctx).")] = "cosine",
    warmup: Annotated[float, typer.Option(help="Warmup as a fraction of the run, in [0, 1).")] = 0.1,
    lr: Annotated[float, typer.Option(help="Base (peak) learning rate.")] = 0.05,
    optimizer: Annotated[str, typer.Option(help=f"Optimizer: {_choices(OPTIMIZERS)} (sgd has momentum 0.9).")] = "sgd",
    policy: Annotated[str, typer.Option(help=f"How the candidate steps its schedule: {_choices(POLICIES)}. The reference always runs per-update.")] = "per-update",
    tail: Annotated[str, typer.Option(help=f"Samples left over at an epoch's end: {_choices(TAILS)}.")] = "drop",
    loss_norm: Annotated[str, typer.Option(help=f"Loss normalisation: {_choices(LOSS_NORMS)} (global: sum / samples of the whole effective batch; mean: per-micro-batch mean / accum).")] = "global",
    seed: Annotated[int, typer.Option(help="Seed of the split, the initial weights and the data order.")] = 0,
    dtype: Annotated[str, typer.Option(help=f"Floating-point type: {_choices(DTYPES)}.")] = "float64",
    device: Annotated[str, typer.Option(help=f"Device: {_choices(DEVICES)}.")] = "auto",
    tol_lr: Annotated[Optional[float], typer.Option(help="lr check: |ΔLR| ≤ tol·max(1, |LR|). [default: 1e-12]")] = None,
    tol_params: Annotated[Optional[float], typer.Option(help="params check: max|Δp| / max|p| after every update. [default: 1e-9 float64, 1e-4 float32]")] = None,
    tol_loss: Annotated[Optional[float], typer.Option(help="loss check: |Δloss| / |loss| per update. [default: 1e-9 float64, 1e-3 float32]")] = None,
    tol_metrics: Annotated[Optional[float], typer.Option(help="metrics check: absolute difference of accuracy and macro-F1. [default: 0.01]")] = None,
    out: Annotated[Optional[Path], typer.Option(help="Report folder. [default: ./lrcheck-reports/<pair name>]")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print result.json to stdout instead of the tables.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar and no tables: only the verdict line.")] = False,
) -> None:
    """Train the candidate and the reference on the same data and check that they train alike.

    Exit codes: 0 every check passed, 1 a check failed, 2 bad input, 3 a run crashed.
    """
    console = Console(highlight=False)
    errors = Console(stderr=True, highlight=False)
    try:
        tolerances = Tolerances.for_dtype(dtype, lr=tol_lr, params=tol_params, loss=tol_loss,
                                          metrics=tol_metrics)
        candidate = RunSpec(task=task, bs=bs, accum=accum, world=1, epochs=epochs,
                            scheduler=scheduler, warmup=warmup, lr=lr, optimizer=optimizer,
                            policy=policy, tail=tail, loss_norm=loss_norm, seed=seed, dtype=dtype,
                            device=device, samples=samples)
        pair = PairSpec.build(candidate, ref_bs=ref_bs, tolerances=tolerances)
        report = _run(pair, out, show_progress=not (quiet or json_out), console=errors)
    except LrcheckError as exc:
        raise fail(exc) from None
    except KeyboardInterrupt:
        errors.print("lrcheck: interrupted")
        raise typer.Exit(130) from None

    if json_out:
        from lrcheck.reports.files import result_json

        sys.stdout.write(result_json(report))
    elif quiet:
        from lrcheck.reports.table import verdict_text

        console.print(verdict_text(report))
    else:
        from lrcheck.reports.table import render

        console.print(render(report))
    errors.print(f"report: {report.out}")
    raise typer.Exit(report.exit_code)


def _run(pair: PairSpec, out: Path | None, *, show_progress: bool, console: Console) -> Any:
    """Validate what can be validated before training, train with a progress bar, save."""
    from lrcheck.experiments.schedulers import SCHEDULERS, load_factory
    from lrcheck.reports.files import prepare_out
    from lrcheck.runner.device import resolve_device

    if pair.candidate.scheduler not in SCHEDULERS:
        load_factory(pair.candidate.scheduler)
    folder = prepare_out(out if out is not None else DEFAULT_REPORTS / pair.name)
    resolve_device(pair.candidate.device)

    import lrcheck

    if show_progress and console.is_terminal:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        with Progress("[progress.description]{task.description}", BarColumn(),
                      MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                      transient=True) as bar:
            tasks: dict[str, Any] = {}

            def progress(role: str, done: int, total: int) -> None:
                if role not in tasks:
                    tasks[role] = bar.add_task(f"{role} updates", total=total)
                bar.update(tasks[role], completed=done)

            report = lrcheck.compare(pair, progress=progress)
    else:
        report = lrcheck.compare(pair)
    report.out = report.save(folder)
    return report


@app.command("list")
def list_command() -> None:
    """List the tasks, schedulers and policies."""
    console = Console(highlight=False)
    for title, rows in (
        ("tasks (--task)", [(t.name, t.description, t.source) for t in TASKS.values()]),
        ("schedulers (--scheduler)", [(s.name, s.description, "") for s in SCHEDULERS.values()]),
        ("policies (--policy)", [(p.name, p.description, p.who) for p in POLICIES.values()]),
    ):
        table = Table(title=title, title_justify="left")
        table.add_column("name", style="bold")
        table.add_column("what")
        table.add_column("" if "schedulers" in title else ("data" if "tasks" in title else "who"))
        for row in rows:
            table.add_row(*row)
        console.print(table)


def main() -> None:
    app()
