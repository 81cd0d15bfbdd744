"""The command line: flags → specs → library call → render.

Torch, scikit-learn and matplotlib are imported only once a command runs, so ``--help`` is fast.
Library errors become one line on stderr and the exit code of DESIGN.md; a traceback reaching a
user is a bug.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from lrcheck.errors import Interrupted, LrcheckError, RunError, SpecError, Stopped, stop_words
from lrcheck.experiments.schedulers import SCHEDULERS
from lrcheck.experiments.tasks import TASKS
from lrcheck.plan.policies import POLICIES
from lrcheck.runner.dist.torchrun import candidate_world, check_ref_world, torchrun_env
from lrcheck.spec import (AMPS, DEFAULT_TIMEOUT_S, DEVICES, DTYPES, LOSS_NORMS, OPTIMIZERS, TAILS,
                          TRACE_DEFAULTS, PairSpec, RunSpec, Tolerances)

DEFAULT_REPORTS = Path("lrcheck-reports")
# The flags' defaults are the library's (RunSpec's, TRACE_DEFAULTS), so that lrcheck.compare()
# and a suite's [[pair]] run what the command runs when told nothing.
DEFAULT = RunSpec()
SUITE_LOG_WIDTH = 160
LOG_WIDTH = 110  # tables printed to a file or a CI log: wide enough not to fold every detail


def _stdout_console(width: int = LOG_WIDTH) -> Console:
    """stdout; when it is a file or a CI log, at least ``width`` columns wide."""
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=max(console.width, width))
    return console


def _choices(names: Any) -> str:
    return ", ".join(names)


# Options that several commands share.
SchedulerOpt = Annotated[str, typer.Option(help=f"LR schedule: {_choices(SCHEDULERS)}, or a factory 'pkg.module:make' / 'path/to/file.py:make' called as make(optimizer, ctx).")]
WarmupOpt = Annotated[float, typer.Option(help="Warmup as a fraction of the run, in [0, 1).")]
LrOpt = Annotated[float, typer.Option(help="Base (peak) learning rate.")]
PolicyOpt = Annotated[str, typer.Option(help=f"How the candidate steps its schedule: {_choices(POLICIES)}. The reference always runs per-update.")]
TailOpt = Annotated[str, typer.Option(help=f"Samples left over at an epoch's end: {_choices(TAILS)}.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print result.json to stdout instead of the tables.")]
TolLrOpt = Annotated[Optional[float], typer.Option(help="lr check: |ΔLR| ≤ tol·max(1, |LR|). [default: 1e-12]")]


def _out_folder(text: str) -> Path:
    """``reports.files.out_folder``, imported only when ``--out`` is given (it needs numpy)."""
    from lrcheck.reports.files import out_folder

    return out_folder(text)


def _out_option(help: str) -> Any:
    """``--out DIR``; an empty name is refused while the flags are read."""
    return typer.Option(help=help, metavar="DIR", parser=_out_folder)


def _error_line(text: str) -> None:
    """``text`` as lrcheck's one error line on stderr."""
    Console(stderr=True, highlight=False, soft_wrap=True).print(
        f"[bold red]lrcheck: error:[/] {escape(' '.join(text.split()))}", markup=True)


# The click that typer runs on: its own vendored copy (typer._click) in recent typer, click itself
# before.
_click = importlib.import_module(typer.BadParameter.__module__)


class _Commands(typer.core.TyperGroup):
    """lrcheck's commands, whose usage errors (a value that does not parse, an unknown flag, a
    missing or extra argument) are told as every other bad input is: one line on stderr and
    exit 2, instead of click's usage block. Help, with or without arguments, is unchanged."""

    def main(self, args: Any = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except getattr(_click, "NoArgsIsHelpError", ()) as exc:  # click >= 8.2
            exc.show()
            sys.exit(exc.exit_code)
        except _click.ClickException as exc:
            where = exc.ctx.command_path if isinstance(exc, _click.UsageError) and exc.ctx else None
            text = exc.format_message().rstrip(".")
            _error_line(text + (f"; see '{where} --help'" if where else ""))
            sys.exit(2)
        except LrcheckError as exc:  # raised while the flags are read (``_out_option``)
            _error_line(str(exc))
            sys.exit(exc.exit_code)
        except _click.Abort as exc:  # click's word for a KeyboardInterrupt (or errors.Stopped)
            print(f"lrcheck: {stop_words(exc.__cause__ or KeyboardInterrupt())}",
                  file=sys.stderr)
            sys.exit(130)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(cls=_Commands, no_args_is_help=True, add_completion=False,
                  rich_markup_mode=None,
                  help="Prove (or disprove) that gradient accumulation and several processes "
                       "train exactly like one process with the same effective batch.")


def _print_version(value: bool) -> None:
    """``--version``: the installed distribution's version, without importing torch."""
    if not value:
        return
    from importlib.metadata import PackageNotFoundError, version

    try:
        number = version("lrcheck")
    except PackageNotFoundError:  # run from a source tree that was not installed
        from lrcheck import __version__ as number
    typer.echo(f"lrcheck {number}")
    raise typer.Exit(0)


@app.callback()
def _options(
    version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                          help="Print lrcheck's version and exit.")] = False,
) -> None:
    pass


def parse_updates(flag: str, text: str) -> tuple[int, ...]:
    """``"3,7"`` → ``(3, 7)``: update numbers given on the command line."""
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise SpecError(f"{flag} takes update numbers separated by commas, such as 3,7; "
                        f"got {text!r}") from None


def fail(exc: LrcheckError, speak: bool = True) -> typer.Exit:
    """Print ``exc`` as one line on stderr (unless ``speak`` is False); the ``typer.Exit`` to
    raise."""
    if speak:
        _error_line(str(exc))
    return typer.Exit(exc.exit_code)


@app.command("compare")
def compare_command(
    accum: Annotated[int, typer.Option(help="Micro-batches per optimizer update.")] = DEFAULT.accum,
    bs: Annotated[int, typer.Option(help="Micro-batch size: samples one process feeds forward at once.")] = DEFAULT.bs,
    ref_bs: Annotated[Optional[int], typer.Option(help="The reference's batch size (accum 1); bs·accum·nproc must equal ref-bs·ref-nproc. [default: bs·accum·nproc / ref-nproc]")] = None,
    nproc: Annotated[Optional[int], typer.Option(help="Processes the candidate runs as, launched through torchrun (gloo on CPU, nccl with one GPU each on CUDA). Inside torchrun, its world size. [default: 1]")] = None,
    ref_nproc: Annotated[int, typer.Option(help="Processes the reference runs as (more than 1: launched through torchrun too).")] = 1,
    timeout: Annotated[float, typer.Option(help="Multi-process runs only: seconds a run launched through torchrun may go without finishing an optimizer update (start-up counts); then every process is stopped and lrcheck exits 3. A run in this process has no timeout.")] = DEFAULT_TIMEOUT_S,
    epochs: Annotated[int, typer.Option(help="Epochs over the training split.")] = DEFAULT.epochs,
    task: Annotated[str, typer.Option(help=f"What is trained: {_choices(TASKS)}.")] = DEFAULT.task,
    samples: Annotated[int, typer.Option(help="Samples generated for --task synthetic or tokens.")] = DEFAULT.samples,
    scheduler: SchedulerOpt = DEFAULT.scheduler,
    warmup: WarmupOpt = DEFAULT.warmup,
    lr: LrOpt = DEFAULT.lr,
    optimizer: Annotated[str, typer.Option(help=f"Optimizer: {_choices(OPTIMIZERS)} (sgd has momentum 0.9).")] = DEFAULT.optimizer,
    policy: PolicyOpt = DEFAULT.policy,
    tail: TailOpt = DEFAULT.tail,
    loss_norm: Annotated[str, typer.Option(help=f"Loss normalisation: {_choices(LOSS_NORMS)} (global: sum / samples of the whole effective batch; mean: per-micro-batch mean / accum).")] = DEFAULT.loss_norm,
    seed: Annotated[int, typer.Option(help="Seed of the split, the initial weights and the data order.")] = DEFAULT.seed,
    dtype: Annotated[str, typer.Option(help=f"Floating-point type: {_choices(DTYPES)}.")] = DEFAULT.dtype,
    device: Annotated[str, typer.Option(help=f"Device: {_choices(DEVICES)}.")] = DEFAULT.device,
    amp: Annotated[str, typer.Option(help=f"Mixed precision: {_choices(AMPS)} (fp16: float16 autocast and a GradScaler that skips steps with non-finite gradients; needs --dtype float32).")] = DEFAULT.amp,
    resume_at: Annotated[Optional[int], typer.Option(metavar="K", help="Stop the candidate after update K, save a checkpoint (state_dicts, RNG, data position), build everything again from scratch, load it and go on.")] = None,
    resume_at_micro: Annotated[Optional[int], typer.Option(metavar="M", help="The same after micro-batch M (counted over the run), in the middle of an accumulation window.")] = None,
    inject_overflow: Annotated[str, typer.Option(metavar="K[,K...]", help="Make the gradients of these updates (both runs) non-finite, so the GradScaler skips them; needs --amp fp16.")] = "",
    tol_lr: TolLrOpt = None,
    tol_params: Annotated[Optional[float], typer.Option(help="params check: max|Δp| / max|p| after every update. [default: 1e-9 float64, 1e-4 float32]")] = None,
    tol_loss: Annotated[Optional[float], typer.Option(help="loss check: |Δloss| / |loss| per update. [default: 1e-9 float64, 1e-3 float32]")] = None,
    tol_metrics: Annotated[Optional[float], typer.Option(help="metrics check: absolute difference of accuracy and macro-F1. [default: 0.01]")] = None,
    out: Annotated[Optional[Path], _out_option("Report folder. [default: ./lrcheck-reports/<pair name>]")] = None,
    json_out: JsonOpt = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar and no tables: only the verdict line.")] = False,
) -> None:
    """Train the candidate and the reference on the same data and check that they train alike.

    Under torchrun (torchrun --nproc-per-node 2 -m lrcheck compare ...) the candidate runs on
    every rank and rank 0 alone trains the reference and reports; every rank exits with the
    verdict's code.

    Exit codes: 0 every check passed, 1 a check failed (a scheduler.step() that raises stops its
    run and fails `updates`), 2 bad input, 3 a run crashed otherwise or hung, 130 interrupted
    (what was recorded is saved with verdict "incomplete").
    """
    console = _stdout_console()
    errors = Console(stderr=True, highlight=False)
    speak, member, renderer = os.environ.get("RANK", "0") == "0", None, None
    try:
        env = torchrun_env(os.environ)
        speak = env is None or env.rank == 0
        if not timeout > 0:
            raise SpecError(f"--timeout must be a number of seconds > 0, got {timeout!r}")
        check_ref_world(ref_nproc, env)
        tolerances = Tolerances.for_dtype(dtype, amp, lr=tol_lr, params=tol_params,
                                          loss=tol_loss, metrics=tol_metrics)
        candidate = RunSpec(task=task, bs=bs, accum=accum, world=candidate_world(nproc, env),
                            epochs=epochs, scheduler=scheduler, warmup=warmup, lr=lr,
                            optimizer=optimizer, policy=policy, tail=tail, loss_norm=loss_norm,
                            seed=seed, dtype=dtype, device=device, samples=samples, amp=amp,
                            inject_overflow=parse_updates("--inject-overflow", inject_overflow),
                            resume_at=resume_at, resume_at_micro=resume_at_micro)
        pair = PairSpec.build(candidate, ref_bs=ref_bs, ref_world=ref_nproc, tolerances=tolerances)
        show_progress = speak and not (quiet or json_out)
        _starting(errors, show_progress, f"loading {task} and building the runs")
        folder = _prepare(pair, out, create=speak)
        renderer = _renderer(speak)
        if env is not None and env.world > 1:
            from lrcheck.runner.dist.group import join

            member = join(env, device, timeout)
        report = _run(pair, folder, show_progress=show_progress, console=errors,
                      timeout=timeout, member=member)
        code = report.exit_code if report is not None else 0
        if member is not None:
            code = member.share(code)
        try:
            if report is not None:
                report.out = report.save(folder, renderer)
                renderer.finish()
                _show(report, console, errors, json_out=json_out, quiet=quiet)
        finally:
            if member is not None:
                from lrcheck.runner.dist.group import finish

                # torchrun stops every rank as soon as one exits non-zero: the others wait
                # here until rank 0 has written and printed the report and stopped its plot
                # helper (stopped by torchrun, rank 0 would leave the helper to init).
                _close(renderer)
                finish(member)
    except Interrupted as exc:
        raise _interrupted(exc, errors, speak) from None
    except LrcheckError as exc:
        # Under torchrun a crash is told by the rank it happened on; bad input once, by rank 0.
        raise fail(exc, speak=speak or isinstance(exc, RunError)) from None
    except KeyboardInterrupt as stop:
        if speak:
            errors.print(f"lrcheck: {stop_words(stop)}")
        raise typer.Exit(130) from None
    finally:
        _close(renderer)
    raise typer.Exit(code)


def _interrupted(exc: Interrupted, errors: Console, speak: bool = True) -> typer.Exit:
    """Say what Ctrl-C stopped and where what was recorded is; the ``typer.Exit`` (130)."""
    if speak:
        errors.print(escape(f"lrcheck: {exc}; what was recorded: {exc.out}"), soft_wrap=True)
    return typer.Exit(exc.exit_code)


def _show(report: Any, console: Console, errors: Console, *, json_out: bool, quiet: bool) -> None:
    if json_out:  # the file just written, not a second serialisation of a long trace
        sys.stdout.write((report.out / "result.json").read_text(encoding="utf-8"))
    elif quiet:
        from lrcheck.reports.table import verdict_text

        console.print(verdict_text(report))
    else:
        from lrcheck.reports.table import render

        console.print(render(report))
    errors.print(escape(f"report: {report.out}"), soft_wrap=True)
    sys.stdout.flush()


def _starting(console: Console, show_progress: bool, what: str) -> None:
    """A line on ``console`` where a progress bar will be shown: the first bar takes seconds to
    come (torch, the data, the runs are being set up), and a blank terminal looks hung."""
    if show_progress and console.is_terminal:
        console.print(f"lrcheck: {what}…", markup=False)


def _renderer(active: bool) -> Any:
    """Where the command's plots are drawn: in a helper process started now, whose matplotlib
    import and drawing overlap the training (``reports.render``), when this process writes the
    report and the machine has a second CPU; else in this process."""
    from lrcheck.reports.render import Renderer, second_cpu

    return Renderer(background=active and second_cpu())


def _close(renderer: Any) -> None:
    if renderer is not None:
        renderer.close()


def _prepare(pair: PairSpec, out: Path | None, *, create: bool,
             default: Path | None = None) -> Path:
    """Validate what can be validated before training; the report folder (created when
    ``create``: under torchrun only rank 0 writes)."""
    from lrcheck.experiments.schedulers import SCHEDULERS, load_factory
    from lrcheck.reports.files import prepare_out
    from lrcheck.runner.device import resolve_device

    if pair.candidate.scheduler not in SCHEDULERS:
        load_factory(pair.candidate.scheduler)
    if pair.candidate.device == "cuda":  # the one device that can be missing; checking it
        resolve_device("cuda")           # imports torch, which the others need not wait for
    folder = out if out is not None else (default or DEFAULT_REPORTS / pair.name)
    return prepare_out(folder) if create else folder


def _run(pair: PairSpec, folder: Path, *, show_progress: bool, console: Console,
         timeout: float | None = None, member: Any = None, trace: bool = False) -> Any:
    """Train (or, with ``trace``, step the schedules without a model) with a progress bar; an
    interrupted comparison saves what it recorded."""
    import lrcheck

    def run(**progress: Any) -> Any:
        if trace:
            return lrcheck.trace_schedule(pair, **progress)
        return lrcheck.compare(pair, timeout=timeout, member=member, **progress)

    try:
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

                return run(progress=progress)
        return run()
    except Interrupted as exc:
        if member is None or member.rank == 0:
            from lrcheck.reports.files import write_incomplete

            exc.out = write_incomplete(exc.result, folder)
        raise


def _schedule_name(pair: PairSpec) -> str:
    """The pair's name without the task, which a trace does not have."""
    return pair.name.removeprefix(f"{pair.candidate.task}-")


@app.command("trace")
def trace_command(
    samples: Annotated[int, typer.Option(help="Training samples per epoch (the whole data set of the run being checked).")],
    accum: Annotated[int, typer.Option(help="Micro-batches per optimizer update.")] = TRACE_DEFAULTS["accum"],
    bs: Annotated[int, typer.Option(help="Micro-batch size per process.")] = TRACE_DEFAULTS["bs"],
    nproc: Annotated[int, typer.Option(help="Processes (world size); arithmetic only, none is started.")] = DEFAULT.world,
    ref_bs: Annotated[Optional[int], typer.Option(help="The reference's batch size (accum 1); bs·accum·nproc must equal ref_bs·ref_nproc. [default: bs·accum·nproc / ref_nproc]")] = None,
    ref_nproc: Annotated[int, typer.Option(help="The reference's processes.")] = 1,
    epochs: Annotated[int, typer.Option(help="Epochs over --samples.")] = TRACE_DEFAULTS["epochs"],
    scheduler: SchedulerOpt = DEFAULT.scheduler,
    warmup: WarmupOpt = DEFAULT.warmup,
    lr: LrOpt = DEFAULT.lr,
    optimizer: Annotated[str, typer.Option(help=f"Optimizer whose param groups the schedule drives: {_choices(OPTIMIZERS)}.")] = DEFAULT.optimizer,
    policy: PolicyOpt = DEFAULT.policy,
    tail: TailOpt = DEFAULT.tail,
    tol_lr: TolLrOpt = None,
    out: Annotated[Optional[Path], _out_option("Report folder. [default: ./lrcheck-reports/trace-<pair name>]")] = None,
    json_out: JsonOpt = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar and no tables: only the verdict line.")] = False,
) -> None:
    """Check a schedule without a model, for runs too large to train: step the candidate's and
    the reference's schedules exactly as the training loop would (world size is arithmetic, no
    process starts) and check `updates` and `lr`.

    Exit codes: 0 the schedules match, 1 they do not, 2 bad input, 3 a schedule crashed,
    130 interrupted (what was simulated is saved with verdict "incomplete").
    """
    console = _stdout_console()
    errors = Console(stderr=True, highlight=False)
    renderer = None
    try:
        candidate = RunSpec(**{**TRACE_DEFAULTS, "bs": bs, "accum": accum, "epochs": epochs},
                            world=nproc, scheduler=scheduler, warmup=warmup, lr=lr,
                            optimizer=optimizer, policy=policy, tail=tail, samples=samples)
        pair = PairSpec.build(candidate, ref_bs=ref_bs, ref_world=ref_nproc,
                              tolerances=Tolerances.for_dtype("float64", lr=tol_lr))
        _starting(errors, not (quiet or json_out), "building the schedules")
        folder = _prepare(pair, out, create=True,
                          default=DEFAULT_REPORTS / f"trace-{_schedule_name(pair)}")
        renderer = _renderer(True)
        report = _run(pair, folder, show_progress=not (quiet or json_out), console=errors,
                      trace=True)
        report.out = report.save(folder, renderer)
        renderer.finish()
    except Interrupted as exc:
        raise _interrupted(exc, errors) from None
    except LrcheckError as exc:
        raise fail(exc) from None
    except KeyboardInterrupt as stop:
        errors.print(f"lrcheck: {stop_words(stop)}")
        raise typer.Exit(130) from None
    finally:
        _close(renderer)
    _show(report, console, errors, json_out=json_out, quiet=quiet)
    raise typer.Exit(report.exit_code)


@app.command("diff")
def diff_command(
    reference: Annotated[Path, typer.Argument(help="The reference run's file, written by lrcheck.Recorder.", show_default=False)],
    candidate: Annotated[Path, typer.Argument(help="The candidate run's file, written by lrcheck.Recorder.", show_default=False)],
    tol_lr: TolLrOpt = None,
    tol_loss: Annotated[Optional[float], typer.Option(help="loss check: |Δloss| / |loss| per update. [default: 1e-3, float32's; a file does not say its dtype]")] = None,
    out: Annotated[Optional[Path], _out_option("Report folder. [default: ./lrcheck-reports/diff-<candidate>-vs-<reference>]")] = None,
    json_out: JsonOpt = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No tables: only the verdict line.")] = False,
) -> None:
    """Check your own training: compare two files written by lrcheck.Recorder (one JSON line per
    optimizer update), aligned by samples seen, and check `updates`, `lr` and `loss`.

    Exit codes: 0 the runs match, 1 they do not, 2 bad input (a missing file, a malformed line).
    """
    import lrcheck
    from lrcheck.spec import DIFF_DTYPE

    console = _stdout_console()
    errors = Console(stderr=True, highlight=False)
    try:
        tolerances = Tolerances.for_dtype(DIFF_DTYPE, lr=tol_lr, loss=tol_loss)
        report = lrcheck.diff(reference, candidate, tolerances=tolerances)
        report.out = report.save(out if out is not None
                                 else DEFAULT_REPORTS / f"diff-{report.pair.name}")
    except LrcheckError as exc:
        raise fail(exc) from None
    except KeyboardInterrupt as stop:
        errors.print(f"lrcheck: {stop_words(stop)}")
        raise typer.Exit(130) from None
    _show(report, console, errors, json_out=json_out, quiet=quiet)
    raise typer.Exit(report.exit_code)


@app.command("suite")
def suite_command(
    file: Annotated[Path, typer.Argument(help="The suite: a TOML file with [defaults], [[pair]] and [[grid]] entries.", show_default=False)],
    out: Annotated[Optional[Path], _out_option("Report folder: a folder per pair, suite.json, summary.md, junit.xml, matrix.png. [default: ./lrcheck-reports/suite-<file name>]")] = None,
    baseline: Annotated[Optional[Path], typer.Option(help="Compare with this baseline: a changed LR trace, or accuracy/macro-F1 lower by more than tol_metrics, is a regression.")] = None,
    save_baseline: Annotated[Optional[Path], typer.Option(help="Save this run's LR trace digests and metrics as a baseline.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No table: only the closing lines.")] = False,
) -> None:
    """Run every pair of a suite file in one process and write a CI report.

    Exit codes: 0 every pair met its expectation (and no regression), 1 one did not, 2 bad input,
    3 a run crashed, 130 interrupted (the pair that was running is saved as "incomplete", the
    pairs after it are "not run", and the suite's report is written).
    """
    import time

    console = _stdout_console(SUITE_LOG_WIDTH)
    errors = Console(stderr=True, highlight=False, soft_wrap=True)
    renderer = None
    try:
        from lrcheck.reports.files import (append_text, prepare_file, prepare_out, write_json,
                                           write_suite)
        from lrcheck.reports.suite_table import SuiteBoard, verdict_lines
        from lrcheck.suite.baseline import baseline_document, load_baseline
        from lrcheck.suite.outcome import NOT_RUN
        from lrcheck.suite.run import prepare, run_suite
        from lrcheck.suite.spec import load_suite

        suite = load_suite(file)
        records = load_baseline(baseline) if baseline is not None else None
        folder = prepare_out(out if out is not None else DEFAULT_REPORTS / f"suite-{file.stem}")
        if save_baseline is not None:
            prepare_file(save_baseline, "--save-baseline")
        prepare(suite, folder)
        renderer = _renderer(True)
        board = SuiteBoard(suite)
        live = console.is_terminal and not quiet
        started = time.perf_counter()

        def done(index: int, outcome: Any) -> None:
            board.done(index, outcome)
            if live or quiet:
                return
            where = f"[{index + 1}/{len(suite.entries)}] {outcome.entry.name}:"
            console.print(f"{where} not run (interrupted)" if outcome.status == NOT_RUN else
                          f"{where} {outcome.verdict} (expect {outcome.entry.expect}) → "
                          f"{outcome.status}, {time.perf_counter() - started:.1f} s",
                          markup=False)

        def run() -> Any:
            return run_suite(suite, folder, baseline=records,
                             baseline_path=None if baseline is None else str(baseline),
                             on_progress=board.progress if live else None, on_done=done,
                             renderer=renderer)

        if live:
            from rich.live import Live

            with Live(board, console=console, refresh_per_second=4):
                result = run()
        else:
            result = run()
        write_suite(result, folder, renderer)
        renderer.finish()
        # A baseline of a suite cut short would miss pairs: keep the one there is.
        keep_baseline = save_baseline is not None and result.interrupted is None
        if keep_baseline:
            write_json(save_baseline, baseline_document(result.outcomes, suite.path))
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary:
            try:
                append_text(Path(summary), (folder / "summary.md").read_text(encoding="utf-8"))
            except SpecError as exc:  # the step summary is a courtesy: the verdict stands
                errors.print(escape(f"lrcheck: warning: $GITHUB_STEP_SUMMARY: {exc}"))
    except LrcheckError as exc:
        raise fail(exc) from None
    except KeyboardInterrupt as stop:
        errors.print(f"lrcheck: {stop_words(stop)}")
        raise typer.Exit(130) from None
    finally:
        _close(renderer)

    if not live and not quiet:
        console.print(SuiteBoard.finished(result))
    for line in verdict_lines(result):
        console.print(line)
    notes = [f"report: {folder}"]
    if save_baseline is not None:
        notes.append(f"baseline saved: {save_baseline}" if keep_baseline
                     else "baseline not saved: the suite was interrupted")
    errors.print(escape(" · ".join(notes)))
    raise typer.Exit(result.exit_code)


@app.command("list")
def list_command() -> None:
    """List the tasks, schedulers and policies."""
    console = Console(highlight=False)
    for title, headers, rows in (
        ("tasks (--task)", ("name", "what", "data"),
         [(t.name, t.description, t.source) for t in TASKS.values()]),
        ("schedulers (--scheduler)", ("name", "what"),
         [(s.name, s.description) for s in SCHEDULERS.values()]),
        ("policies (--policy)", ("name", "what", "who"),
         [(p.name, p.description, p.who) for p in POLICIES.values()]),
    ):
        table = Table(*headers, title=title, title_justify="left")
        table.columns[0].style = "bold"
        for row in rows:
            table.add_row(*row)
        console.print(table)


STOP_SIGNALS = ("SIGTERM", "SIGHUP")


def _stop_on_signals() -> list[int]:
    """SIGTERM and SIGHUP stop lrcheck as Ctrl-C does (``errors.Stopped``), so a CI runner that
    cancels a job, or a closed terminal, still stops every worker and saves what was recorded.
    Returns the list the signals that arrived are added to. A second one is ignored: lrcheck is
    already stopping. Not under torchrun, which stops its ranks with SIGTERM itself."""
    import signal

    arrived: list[int] = []

    def stop(signum: int, frame: Any) -> None:
        for name in STOP_SIGNALS:
            signal.signal(getattr(signal, name), signal.SIG_IGN)
        arrived.append(signum)
        raise Stopped(signum)

    if torchrun_env(os.environ) is None:
        for name in STOP_SIGNALS:
            if hasattr(signal, name):
                signal.signal(getattr(signal, name), stop)
    return arrived


def main() -> None:
    """The console script (and ``python -m lrcheck``): run the command, then leave without
    finalising the interpreter (``runner.dist.procs.exit_now``): under torchrun that is what keeps a
    rank from aborting in teardown, and everywhere it saves Python's one-second teardown of
    torch. Every report file is written, closed and renamed by then and the plot helper has
    stopped. A command stopped by SIGTERM or SIGHUP exits 128 + its number instead of Ctrl-C's
    130. (Tests call ``app`` through typer's CliRunner, which this does not touch.)"""
    from lrcheck.runner.dist.procs import exit_now

    arrived = _stop_on_signals()
    try:
        app()
        code: Any = 0
    except SystemExit as exc:
        code = exc.code
    if code is None:
        code = 0
    elif not isinstance(code, int):  # what sys.exit("message") means
        print(code, file=sys.stderr)
        code = 1
    if code == 130 and arrived:
        code = 128 + arrived[0]
    exit_now(code)
