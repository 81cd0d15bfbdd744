"""``lrcheck record`` and ``lrcheck run``: your own training, unmodified, recorded in every
Python process a command starts, and two such commands compared."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from lrcheck.cli.ending import note
from lrcheck.cli.options import (
    DeterministicOpt,
    JsonOpt,
    LogStepsOpt,
    TagOpt,
    TolLrOpt,
    out_option,
)
from lrcheck.cli.output import DEFAULT_REPORTS, Output, saving_incomplete
from lrcheck.spec import DIFF_DTYPE, RUN_STALL_S, Tolerances
from lrcheck.spec.run_options import RunOptions

PASS_ON = {"allow_interspersed_args": False, "ignore_unknown_options": True}
SamplesOpt = Annotated[int | None, typer.Option(min=1, help="Samples per optimizer update over all processes (bs·accum·world), when known; without it updates are aligned by their index.")]
LogsHelp = ("its own log (TensorBoard events, trainer_state.json, Lightning's metrics.csv, an "
            "MLflow store: a file, or a folder holding one) held against what was recorded "
            "(docs/logs.md); the verdict is the training's alone. [default: where its Trainer "
            "logged (transformers' logging_dir/output_dir, Lightning's log_dir), when one ran]")
LogsOpt = Annotated[Path | None, typer.Option("--logs", metavar="DIR", help=f"The candidate's log: {LogsHelp}")]
EveryOpt = Annotated[int | None, typer.Option("--fingerprint-every", min=0, metavar="K", help="A parameter fingerprint and the gradient norm every K updates (0: none, LR only). [default: 50]")]


def record_command(
    command: Annotated[list[str] | None, typer.Argument(help="The command, after '--': a script, python -m, torchrun, accelerate launch, deepspeed …", show_default=False)] = None,
    out: Annotated[Path | None, out_option("Record folder. [default: ./lrcheck-records/<program>]")] = None,
    samples: SamplesOpt = None,
    fingerprint_every: EveryOpt = None,
    deterministic: DeterministicOpt = False,
    logs: Annotated[Path | None, typer.Option("--logs", metavar="DIR", help=f"The command's log: {LogsHelp}; the findings are printed and written into the folder's logs.json.")] = None,
    tag: TagOpt = None,
    log_steps: LogStepsOpt = None,
) -> None:
    """Run COMMAND with lrcheck's recording in every Python process it starts: per optimizer
    update the LR of every param group, the scheduler steps and GradScaler-skipped steps since
    the previous update, and every K updates the gradient norm and a parameter fingerprint. One
    Recorder file per rank and run.json go into the folder; `lrcheck diff` compares two.

    Your code is not changed and imports nothing of lrcheck. Exit code: the command's.
    """
    from lrcheck.api import record

    command = command or []
    folder = out if out is not None else Path("lrcheck-records") / _name(command)
    run = record(command, folder, samples=samples, fingerprint_every=fingerprint_every,
                 deterministic=deterministic, logs=logs, tags=tag, log_steps=log_steps)
    ranks = len({name.split("-")[0].removesuffix(".jsonl") for name in run.updates})
    updates = max(run.updates.values(), default=0)
    if run.logs:
        from lrcheck.cli.output import stdout_console
        from lrcheck.reports.logs import findings_table

        stdout_console().print(findings_table(run.logs))
    note(f"recorded {updates} update(s) on {ranks} rank(s) into {folder} "
         f"(the command: {run.how_it_ended})")
    raise typer.Exit(run.exit_code if run.exit_code >= 0 else 128 - run.exit_code)


def run_command(
    reference: Annotated[str, typer.Argument(help="The reference command line, quoted: 'python train.py --bs 32'.", show_default=False)],
    candidate: Annotated[str, typer.Argument(help="The candidate command line, quoted.", show_default=False)],
    samples: SamplesOpt = None,
    fingerprint_every: EveryOpt = None,
    tol_lr: TolLrOpt = None,
    out: Annotated[Path | None, out_option("Report folder, reused if it exists; the records go into its reference/ and candidate/. [default: ./lrcheck-reports/run-<candidate program>, or run-<candidate program>-2, -3, … where that holds an earlier run]")] = None,
    json_out: JsonOpt = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Neither the commands' output nor the tables: only the verdict line.")] = False,
    free: Annotated[bool, typer.Option("--free", help="Run the commands one after the other, each free-running, instead of side by side in lockstep: parameters and gradient norms are then judged from fingerprints, as drift or jumps.")] = False,
    strict: Annotated[bool, typer.Option("--strict", help="Fail where the effects could be judged only up to some update (free-running: the twin decorrelated there) instead of warning.")] = False,
    timeout: Annotated[float, typer.Option(metavar="SECONDS", help="In lockstep, once updates have begun: seconds without a new update in either command before both are stopped as hung, exit 3 (0: wait for ever).")] = RUN_STALL_S,
    deterministic: DeterministicOpt = False,
    ref_logs: Annotated[Path | None, typer.Option("--ref-logs", metavar="DIR", help=f"The reference's log: {LogsHelp}")] = None,
    logs: LogsOpt = None,
    tag: TagOpt = None,
    log_steps: LogStepsOpt = None,
    interrupt_at: Annotated[int | None, typer.Option("--interrupt-at", metavar="N", help="Interrupt the candidate once it has made N updates (before update N's step), as a preemption does, then run --resume: the two processes are held against the uninterrupted reference as one run, with what a resume must carry checked (docs/resume.md).")] = None,
    interrupt_after_micro: Annotated[int | None, typer.Option("--interrupt-after-micro", metavar="M", help="With --interrupt-at N: interrupt the candidate in the middle of update N's accumulation window, after its M-th backward pass and before the next, instead of before update N's step.")] = None,
    resume: Annotated[str | None, typer.Option("--resume", metavar="CMD", help="With --interrupt-at: the command line that resumes the candidate from its checkpoint, quoted.")] = None,
    interrupt_signal: Annotated[str, typer.Option("--interrupt-signal", metavar="TERM|KILL", help="With --interrupt-at: SIGTERM to the candidate's process group, then SIGKILL after --grace seconds (TERM); or SIGKILL at once (KILL).")] = "TERM",
    grace: Annotated[float, typer.Option("--grace", metavar="SECONDS", help="With --interrupt-signal TERM: the seconds the candidate is given to end before SIGKILL.")] = 30.0,
) -> None:
    """Record two commands of your own training (each a quoted command line, split as a shell
    would, not run through one) and compare them as `lrcheck diff` does, with the whole
    report: the table, plots, report.md, report.html and result.json.

    By default the two run side by side, the candidate in lockstep: after each update it
    loads the reference's parameters and optimizer state, so every update's gradient and
    parameters are compared with the reference's from the same state (docs/own-training.md).

    Exit codes: 0 the runs match, 1 a check fails, 2 bad input, 3 a command failed, 130
    interrupted (what was recorded is saved with verdict "incomplete"; 143 on SIGTERM).
    """
    from lrcheck.api import run_commands, save_report

    options = RunOptions(
        samples=samples, fingerprint_every=fingerprint_every,
        tolerances=Tolerances.for_dtype(DIFF_DTYPE, lr=tol_lr), free=free, strict=strict,
        timeout=timeout or None, deterministic=deterministic, ref_logs=ref_logs, logs=logs,
        tags=tuple(tag or ()), log_steps=log_steps, interrupt_at=interrupt_at,
        interrupt_after_micro=interrupt_after_micro, resume=resume, interrupt_signal=interrupt_signal, grace=grace)
    output = Output(json=json_out, quiet=quiet)
    folder = out if out is not None else _unused(
        DEFAULT_REPORTS / f"run-{_name(shlex.split(candidate))}")
    with output.running(), saving_incomplete(folder, output):
        report = run_commands(reference, candidate, folder, options,
                              echo=None if quiet or json_out else sys.stderr)
        output.show(report, save_report(report, folder))
    raise typer.Exit(report.exit_code)


def _name(command: list[str]) -> str:
    """A folder name for ``command``: its script's or module's stem."""
    words = [w for w in command if not w.startswith("-")]
    pick = next((w for w in words if w.endswith(".py")), words[0] if words else "command")
    return Path(pick).stem or "command"


def _unused(folder: Path) -> Path:
    """``folder`` where it does not exist or is empty; else the first of ``folder-2``,
    ``folder-3``, … that does not exist, made here so that a second ``lrcheck run`` started
    meanwhile picks the next, and said in a note: a default folder never replaces an earlier
    run's report."""
    if not folder.exists() or (folder.is_dir() and not any(folder.iterdir())):
        return folder
    n = 2
    while True:
        chosen = folder.with_name(f"{folder.name}-{n}")
        try:
            chosen.mkdir(parents=True)
        except FileExistsError:
            n += 1
            continue
        note(f"{folder} holds an earlier run: this one goes into {chosen} "
             "(--out to choose the folder)")
        return chosen
