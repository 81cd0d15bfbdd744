"""The command line: flags → specs → one library call → render.

Torch, scikit-learn and matplotlib are imported only once a command runs, so ``--help`` is fast.
Whatever ends a command — bad input, a crash, Ctrl-C, a signal — becomes one line on stderr and
the exit code of DESIGN.md in one place, ``_exit_code``; a traceback reaching a user is a bug.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TextIO

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from lrcheck.errors import Interrupted, LrcheckError, RunError, SpecError, Stopped, stop_words
from lrcheck.experiments.schedulers import SCHEDULERS
from lrcheck.experiments.tasks import GENERATED_SAMPLES, TASKS
from lrcheck.plan.frameworks import FRAMEWORKS
from lrcheck.plan.policies import POLICIES
from lrcheck.runner.dist.torchrun import candidate_world, check_ref_world, torchrun_env
from lrcheck.spec import (
    AMPS,
    DEFAULT_TIMEOUT_S,
    DEVICES,
    DTYPES,
    LIGHTNING_SAMPLERS,
    LOSS_NORMS,
    OPTIMIZERS,
    TAILS,
    TRACE_DEFAULTS,
    TRAINER_LOSSES,
    PairSpec,
    RunSpec,
    Tolerances,
    reference_framework,
)

if TYPE_CHECKING:
    from lrcheck.reports.render import Renderer
    from lrcheck.result import Report
    from lrcheck.runner.pair import Progress
    from lrcheck.suite.outcome import PairOutcome, SuiteResult
    from lrcheck.suite.spec import Suite

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
PolicyOpt = Annotated[str, typer.Option(help=f"How lrcheck's own loop (--framework plain) steps the candidate's schedule: {_choices(POLICIES)}. The reference always runs per-update. ('accelerate', the old spelling, is --framework accelerate --ref-framework plain.)")]
TailOpt = Annotated[str, typer.Option(help=f"Samples left over at an epoch's end: {_choices(TAILS)}.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print result.json to stdout instead of the tables.")]
TolLrOpt = Annotated[float | None, typer.Option(help="lr check: |ΔLR| ≤ tol·max(1, |LR|). [default: 1e-12]")]


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


def _speaks() -> bool:
    """Whether this process tells what happened: under torchrun every rank runs the command, and
    rank 0 alone speaks for them (a crash excepted: the rank it happened on tells it)."""
    return os.environ.get("RANK", "0") == "0"


def _exit_code(exc: BaseException) -> int:
    """The one place where what ended a command becomes its line on stderr and its exit code
    (DESIGN.md): a usage error or bad input 2, a crash 3, Ctrl-C or a signal 130 (``main`` makes
    a signal's 128 + its number). Anything else is a bug, raised as it is."""
    errors = Console(stderr=True, highlight=False, soft_wrap=True)
    if isinstance(exc, _click.ClickException):
        usage: Any = exc  # the click typer runs on (``_click``), which mypy does not see
        if type(usage).__name__ == "NoArgsIsHelpError":  # click >= 8.2: help, not an error
            usage.show()
            return int(usage.exit_code)
        where = usage.ctx.command_path if isinstance(usage, _click.UsageError) and usage.ctx \
            else None
        text = usage.format_message().rstrip(".")
        _error_line(text + (f"; see '{where} --help'" if where else ""))
        return 2
    if isinstance(exc, Interrupted):
        if _speaks():
            saved = "" if exc.saved is None else f"; what was recorded: {exc.saved}"
            errors.print(escape(f"lrcheck: {exc}{saved}"))
        return exc.exit_code
    if isinstance(exc, (KeyboardInterrupt, typer.Abort)):  # Abort: click's word for Ctrl-C
        if _speaks():
            stop = exc if isinstance(exc, KeyboardInterrupt) else exc.__cause__
            errors.print(f"lrcheck: {stop_words(stop or KeyboardInterrupt())}")
        return 130
    if isinstance(exc, LrcheckError):
        if _speaks() or isinstance(exc, RunError):
            _error_line(str(exc))
        return exc.exit_code
    raise exc


class _Commands(typer.core.TyperGroup):
    """lrcheck's commands. Whatever ends one goes through ``_exit_code``: its usage errors (a
    value that does not parse, an unknown flag, a missing or extra argument) are told as every
    other bad input is, in one line and exit 2, instead of click's usage block; Ctrl-C is told,
    not typer's silent 130. Help, with or without arguments, is unchanged."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (LrcheckError, Interrupted, KeyboardInterrupt) as exc:
            raise typer.Exit(_exit_code(exc)) from None

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             windows_expand_args: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args,
                                **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, windows_expand_args,
                                **extra)
        except (_click.ClickException, typer.Abort) as exc:  # while the flags are read
            code = _exit_code(exc)
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


def _flush_output() -> None:
    """What Python and C hold buffered for stdout and stderr, written now."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, OSError, ValueError):
            stream.flush()
    with contextlib.suppress(AttributeError, OSError, TypeError):
        import ctypes

        ctypes.CDLL(None).fflush(None)  # every C stdio stream (printf from a library)


class _JsonStdout:
    """stdout that carries the JSON alone (``--json``), whatever a framework or any library
    prints while the command runs: while ``held``, file descriptor 1, where print(), logging
    and C libraries write and which every process started meanwhile inherits, is stderr's, and
    ``write`` goes to the real stdout."""

    def __init__(self) -> None:
        self._fd: int | None = None  # while held: the real stdout's file descriptor, or
        self._stream: TextIO | None = None  # sys.stdout where it was not on 1 (a CliRunner's)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        original = sys.stdout
        _flush_output()
        try:
            saved = os.dup(1)
        except OSError:  # no file descriptor 1: nothing else can write there either
            yield
            return
        try:
            on_fd_1 = original.fileno() == 1
        except (AttributeError, OSError, ValueError):
            on_fd_1 = False
        self._fd, self._stream = (saved, None) if on_fd_1 else (None, original)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        try:
            yield
        finally:
            _flush_output()
            sys.stdout = original
            os.dup2(saved, 1)
            os.close(saved)
            self._fd = self._stream = None

    def write(self, text: str) -> None:
        if self._fd is None:
            stream = self._stream or sys.stdout
            stream.write(text)
            stream.flush()
            return
        data = text.encode("utf-8")
        while data:
            data = data[os.write(self._fd, data):]


@dataclass(frozen=True)
class _Output:
    """How a command shows what it did: the tables on stdout (``json``: result.json instead, and
    nothing else on stdout while the command runs: ``running``; ``quiet``: the verdict line
    only), a progress bar on stderr when that is a terminal, the report's folder on stderr.
    Under torchrun rank 0 alone shows anything (``speaks``)."""

    json: bool = False
    quiet: bool = False
    speaks: bool = True
    stdout: _JsonStdout = field(default_factory=_JsonStdout, compare=False, repr=False)

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Where the command runs: with ``json``, stdout is held for the JSON alone."""
        if not self.json:
            yield
            return
        with self.stdout.held():
            yield

    @property
    def progress(self) -> bool:
        return self.speaks and not (self.quiet or self.json)

    def starting(self, what: str) -> None:
        """A line where a progress bar will be shown: the first bar takes seconds to come
        (torch, the data, the runs are being set up), and a blank terminal looks hung."""
        errors = Console(stderr=True, highlight=False)
        if self.progress and errors.is_terminal:
            errors.print(f"lrcheck: {what}…", markup=False)

    def show(self, report: Report, folder: Path) -> None:
        """``report``, saved in ``folder``, on stdout; the folder on stderr."""
        console = _stdout_console()
        if self.json:  # the file just written, not a second serialisation of a long trace
            self.stdout.write((folder / "result.json").read_text(encoding="utf-8"))
        elif self.quiet:
            from lrcheck.reports.table import verdict_text

            console.print(verdict_text(report))
        else:
            from lrcheck.reports.kinds import render

            console.print(render(report))
        Console(stderr=True, highlight=False).print(escape(f"report: {folder}"), soft_wrap=True)
        sys.stdout.flush()


class _ProgressBar:
    """Each run's updates as a bar on stderr while the runs train, when ``active`` and stderr is
    a terminal; ``update`` is the ``progress`` callback of the library calls (None when there
    is no bar)."""

    def __init__(self, active: bool) -> None:
        self._bar: Any = None
        self._tasks: dict[str, Any] = {}
        console = Console(stderr=True, highlight=False)
        if active and console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

            self._bar = Progress("[progress.description]{task.description}", BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                                 transient=True)
            self._bar.start()

    @property
    def update(self) -> Progress | None:
        return None if self._bar is None else self._update

    def _update(self, role: str, done: int, total: int) -> None:
        if role not in self._tasks:
            self._tasks[role] = self._bar.add_task(f"{role} updates", total=total)
        self._bar.update(self._tasks[role], completed=done)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> _ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _plots(active: bool) -> Renderer:
    """Where the command's plots are drawn: in a helper process started now, whose matplotlib
    import and drawing overlap the training (``reports.render``), when this process writes the
    report and the machine has a second CPU; else in this process. Used as a context manager:
    the helper is stopped at the end."""
    from lrcheck.reports.render import Renderer, second_cpu

    return Renderer(background=active and second_cpu())


def _save_and_show(report: Report, folder: Path, renderer: Renderer, output: _Output) -> None:
    """Save ``report`` in ``folder`` (its plots drawn by ``renderer``, which is stopped then),
    and show it."""
    from lrcheck.reports.files import write_report

    saved = write_report(report, folder, renderer)
    renderer.finish()
    renderer.close()
    output.show(report, saved)


@contextlib.contextmanager
def _saving_incomplete(folder: Path, output: _Output) -> Iterator[None]:
    """What an interrupted run had recorded, saved in ``folder`` (by rank 0 alone under
    torchrun): ``Interrupted`` is raised again, saying where."""
    try:
        yield
    except Interrupted as exc:
        if not output.speaks:
            raise
        from lrcheck.reports.files import write_incomplete

        raise exc.saved_in(write_incomplete(exc.result, folder)) from None


def _note(text: str) -> None:
    """A line on stderr that is not an error: lrcheck did what was asked, and says how."""
    if _speaks():
        Console(stderr=True, highlight=False, soft_wrap=True).print(escape(f"lrcheck: note: {text}"))


@contextlib.contextmanager
def _prepared(pair: PairSpec, out: Path | None, *, create: bool,
              default: Path | None = None) -> Iterator[Path]:
    """Validate what can be validated before training; the report folder (created when
    ``create``: under torchrun only rank 0 writes), removed again when the command ends before
    anything was written there (bad input that only the runs' data shows, a crash)."""
    from lrcheck.experiments.schedulers import SCHEDULERS, load_factory
    from lrcheck.reports.files import report_folder
    from lrcheck.runner.device import resolve_device

    if pair.candidate.scheduler not in SCHEDULERS:
        load_factory(pair.candidate.scheduler)
    if pair.candidate.device == "cuda":  # the one device that can be missing; checking it
        resolve_device("cuda")           # imports torch, which the others need not wait for
    folder = out if out is not None else (default or DEFAULT_REPORTS / pair.name)
    if not create:
        yield folder
        return
    with report_folder(folder) as made:
        yield made


@app.command("compare")
def compare_command(
    accum: Annotated[int, typer.Option(help="Micro-batches per optimizer update.")] = DEFAULT.accum,
    bs: Annotated[int, typer.Option(help="Micro-batch size: samples one process feeds forward at once.")] = DEFAULT.bs,
    ref_bs: Annotated[int | None, typer.Option(help="The reference's batch size (accum 1); bs·accum·nproc must equal ref-bs·ref-nproc. [default: bs·accum·nproc / ref-nproc]")] = None,
    nproc: Annotated[int | None, typer.Option(help="Processes the candidate runs as, launched through torchrun (gloo on CPU, nccl with one GPU each on CUDA). Inside torchrun, its world size. [default: 1]")] = None,
    ref_nproc: Annotated[int, typer.Option(help="Processes the reference runs as (more than 1: launched through torchrun too).")] = 1,
    timeout: Annotated[float, typer.Option(help="Multi-process runs only: seconds a run launched through torchrun may go without finishing an optimizer update (start-up counts); then every process is stopped and lrcheck exits 3. A run in this process has no timeout.")] = DEFAULT_TIMEOUT_S,
    epochs: Annotated[int, typer.Option(help="Epochs over the training split.")] = DEFAULT.epochs,
    task: Annotated[str, typer.Option(help=f"What is trained: {_choices(TASKS)}.")] = DEFAULT.task,
    samples: Annotated[int | None, typer.Option(help=f"Samples generated for --task {' or '.join(t.name for t in TASKS.values() if t.generated)} (the other tasks have a fixed size). [default: {GENERATED_SAMPLES}]")] = DEFAULT.samples,
    scheduler: SchedulerOpt = DEFAULT.scheduler,
    warmup: WarmupOpt = DEFAULT.warmup,
    lr: LrOpt = DEFAULT.lr,
    optimizer: Annotated[str, typer.Option(help=f"Optimizer: {_choices(OPTIMIZERS)} (sgd has momentum 0.9).")] = DEFAULT.optimizer,
    policy: PolicyOpt = DEFAULT.policy,
    framework: Annotated[str, typer.Option(help=f"What trains both runs, for real: {_choices(FRAMEWORKS)}. A framework decides when the optimizer and the scheduler step, how losses are scaled and how an epoch ends; lrcheck holds the model, its weights, the data order, the optimizer and the schedule fixed. See docs/frameworks.md.")] = DEFAULT.framework,
    ref_framework: Annotated[str | None, typer.Option(help="What trains the reference. [default: --framework; plain compares against lrcheck's own exact loop]")] = None,
    drop_last: Annotated[bool, typer.Option("--drop-last", help="A framework's DataLoader(drop_last=True): each process drops its epoch's last, short micro-batch.")] = DEFAULT.drop_last,
    trainer_loss: Annotated[str, typer.Option(help=f"--framework transformers: how the Trainer scales a micro-batch's loss: {_choices(TRAINER_LOSSES)} (mean: a model whose forward takes no num_items_in_batch, each micro-batch mean divided by the window's micro-batches; num-items: the forward takes num_items_in_batch and sums over the window's items).")] = DEFAULT.trainer_loss,
    even_batches: Annotated[bool, typer.Option("--even-batches/--no-even-batches", help="--framework transformers: Accelerate's even_batches, which fills the last round of batches from the start of the data so every process gets one.")] = DEFAULT.even_batches,
    lightning_sampler: Annotated[str, typer.Option(help=f"--framework lightning: {_choices(LIGHTNING_SAMPLERS)} (distributed: Lightning's use_distributed_sampler=True wraps lrcheck's order in a DistributedSampler, which pads uneven processes; own: use_distributed_sampler=False, each process gets its share of lrcheck's order).")] = DEFAULT.lightning_sampler,
    tail: TailOpt = DEFAULT.tail,
    loss_norm: Annotated[str, typer.Option(help=f"Loss normalisation: {_choices(LOSS_NORMS)} (global: sum / samples of the whole effective batch; mean: per-micro-batch mean / accum).")] = DEFAULT.loss_norm,
    seed: Annotated[int, typer.Option(help="Seed of the split, the initial weights and the data order.")] = DEFAULT.seed,
    dtype: Annotated[str, typer.Option(help=f"Floating-point type: {_choices(DTYPES)} (--framework ludwig trains in float32 whatever is asked).")] = DEFAULT.dtype,
    device: Annotated[str, typer.Option(help=f"Device: {_choices(DEVICES)}.")] = DEFAULT.device,
    amp: Annotated[str, typer.Option(help=f"Mixed precision: {_choices(AMPS)} (fp16: float16 autocast and a GradScaler that skips steps with non-finite gradients; needs --dtype float32).")] = DEFAULT.amp,
    resume_at: Annotated[int | None, typer.Option(metavar="K", help="Stop the candidate after update K, save a checkpoint (state_dicts, RNG, data position), build everything again from scratch, load it and go on. --framework ludwig: stop Ludwig after update K as its Ctrl-C handler does, resume through its model_resume_path, against the same Ludwig run uninterrupted.")] = None,
    resume_at_micro: Annotated[int | None, typer.Option(metavar="M", help="The same after micro-batch M (counted over the run), in the middle of an accumulation window.")] = None,
    inject_overflow: Annotated[str, typer.Option(metavar="K[,K...]", help="Make the gradients of these updates (both runs) non-finite, so the GradScaler skips them; needs --amp fp16.")] = "",
    tol_lr: TolLrOpt = None,
    tol_params: Annotated[float | None, typer.Option(help="params check: max|Δp| / max|p| after every update. [default: 1e-9 float64, 1e-4 float32]")] = None,
    tol_loss: Annotated[float | None, typer.Option(help="loss check: |Δloss| / |loss| per update (below 1/100 of the first loss, relative to that). [default: 1e-9 float64, 1e-3 float32]")] = None,
    tol_metrics: Annotated[float | None, typer.Option(help="metrics check: absolute difference of accuracy and macro-F1. [default: 0.01]")] = None,
    fast: Annotated[bool, typer.Option("--fast", help="Skip the noise floor: where the candidate cannot run in lockstep with the reference (a framework's own loop), params and loss are otherwise judged against a twin of the reference trained for it (one more run); with --fast, against the tolerances alone.")] = False,
    out: Annotated[Path | None, _out_option("Report folder. [default: ./lrcheck-reports/<pair name>]")] = None,
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
    env = torchrun_env(os.environ)
    if not timeout > 0:
        raise SpecError(f"--timeout must be a number of seconds > 0, got {timeout!r}")
    check_ref_world(ref_nproc, env)
    ref_framework = reference_framework(policy, ref_framework)
    if policy == "accelerate":  # the spelling before --framework
        _note("--policy accelerate is now --framework accelerate --ref-framework plain")
        policy, framework = DEFAULT.policy, "accelerate"
    candidate = RunSpec(task=task, bs=bs, accum=accum, world=candidate_world(nproc, env),
                        epochs=epochs, scheduler=scheduler, warmup=warmup, lr=lr,
                        optimizer=optimizer, policy=policy, tail=tail, loss_norm=loss_norm,
                        seed=seed, dtype=dtype, device=device, samples=samples, amp=amp,
                        inject_overflow=parse_updates("--inject-overflow", inject_overflow),
                        resume_at=resume_at, resume_at_micro=resume_at_micro,
                        framework=framework, drop_last=drop_last, trainer_loss=trainer_loss,
                        even_batches=even_batches, lightning_sampler=lightning_sampler)
    # The run's dtype, which a framework that trains in one type only has set (Ludwig: float32).
    tolerances = Tolerances.for_dtype(candidate.dtype, amp, lr=tol_lr, params=tol_params,
                                      loss=tol_loss, metrics=tol_metrics)
    pair = PairSpec.build(candidate, ref_bs=ref_bs, ref_world=ref_nproc, tolerances=tolerances,
                          ref_framework=ref_framework, noise_floor=not fast)
    output = _Output(json=json_out, quiet=quiet, speaks=_speaks())
    with output.running():
        code = _compare(pair, out, timeout, output)
    raise typer.Exit(code)


def _compare(pair: PairSpec, out: Path | None, timeout: float, output: _Output) -> int:
    """Train and check ``pair`` with a progress bar, save the report and show it; the exit
    code (under torchrun, every rank's: rank 0's verdict)."""
    from lrcheck.api import run_comparison

    output.starting(f"loading {pair.candidate.task} and building the runs")
    with (_prepared(pair, out, create=output.speaks) as folder,
          _plots(output.speaks) as renderer, _saving_incomplete(folder, output),
          _ProgressBar(output.progress) as bar):

        def on_report(report: Report) -> None:
            bar.close()
            _save_and_show(report, folder, renderer, output)

        return run_comparison(pair, on_report, progress=bar.update, timeout=timeout)


def _schedule_name(pair: PairSpec) -> str:
    """The pair's name without the task, which a trace does not have."""
    return pair.name.removeprefix(f"{pair.candidate.task}-")


@app.command("trace")
def trace_command(
    samples: Annotated[int, typer.Option(help="Training samples per epoch (the whole data set of the run being checked).")],
    accum: Annotated[int, typer.Option(help="Micro-batches per optimizer update.")] = TRACE_DEFAULTS["accum"],
    bs: Annotated[int, typer.Option(help="Micro-batch size per process.")] = TRACE_DEFAULTS["bs"],
    nproc: Annotated[int, typer.Option(help="Processes (world size); arithmetic only, none is started.")] = DEFAULT.world,
    ref_bs: Annotated[int | None, typer.Option(help="The reference's batch size (accum 1); bs·accum·nproc must equal ref_bs·ref_nproc. [default: bs·accum·nproc / ref_nproc]")] = None,
    ref_nproc: Annotated[int, typer.Option(help="The reference's processes.")] = 1,
    epochs: Annotated[int, typer.Option(help="Epochs over --samples.")] = TRACE_DEFAULTS["epochs"],
    scheduler: SchedulerOpt = DEFAULT.scheduler,
    warmup: WarmupOpt = DEFAULT.warmup,
    lr: LrOpt = DEFAULT.lr,
    optimizer: Annotated[str, typer.Option(help=f"Optimizer whose param groups the schedule drives: {_choices(OPTIMIZERS)}.")] = DEFAULT.optimizer,
    policy: PolicyOpt = DEFAULT.policy,
    tail: TailOpt = DEFAULT.tail,
    tol_lr: TolLrOpt = None,
    out: Annotated[Path | None, _out_option("Report folder. [default: ./lrcheck-reports/trace-<pair name>]")] = None,
    json_out: JsonOpt = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar and no tables: only the verdict line.")] = False,
) -> None:
    """Check a schedule without a model, for runs too large to train: step the candidate's and
    the reference's schedules exactly as the training loop would (world size is arithmetic, no
    process starts) and check `updates` and `lr`.

    Exit codes: 0 the schedules match, 1 they do not, 2 bad input, 3 a schedule crashed,
    130 interrupted (what was simulated is saved with verdict "incomplete").
    """
    candidate = RunSpec(**{**TRACE_DEFAULTS, "bs": bs, "accum": accum, "epochs": epochs},
                        world=nproc, scheduler=scheduler, warmup=warmup, lr=lr,
                        optimizer=optimizer, policy=policy, tail=tail, samples=samples)
    pair = PairSpec.build(candidate, ref_bs=ref_bs, ref_world=ref_nproc,
                          tolerances=Tolerances.for_dtype("float64", lr=tol_lr))
    output = _Output(json=json_out, quiet=quiet)
    with output.running():
        code = _trace(pair, out, output)
    raise typer.Exit(code)


def _trace(pair: PairSpec, out: Path | None, output: _Output) -> int:
    """Step both schedules with a progress bar, save the report and show it; the exit code."""
    import lrcheck

    output.starting("building the schedules")
    with (_prepared(pair, out, create=True,
                    default=DEFAULT_REPORTS / f"trace-{_schedule_name(pair)}") as folder,
          _plots(True) as renderer):
        with _saving_incomplete(folder, output), _ProgressBar(output.progress) as bar:
            report = lrcheck.trace_schedule(pair, progress=bar.update)
        _save_and_show(report, folder, renderer, output)
    return report.exit_code


@app.command("diff")
def diff_command(
    reference: Annotated[Path, typer.Argument(help="The reference run's file, written by lrcheck.Recorder.", show_default=False)],
    candidate: Annotated[Path, typer.Argument(help="The candidate run's file, written by lrcheck.Recorder.", show_default=False)],
    tol_lr: TolLrOpt = None,
    tol_loss: Annotated[float | None, typer.Option(help="loss check: |Δloss| / |loss| per update. [default: 1e-3, float32's; a file does not say its dtype]")] = None,
    out: Annotated[Path | None, _out_option("Report folder. [default: ./lrcheck-reports/diff-<candidate>-vs-<reference>]")] = None,
    json_out: JsonOpt = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No tables: only the verdict line.")] = False,
) -> None:
    """Check your own training: compare two files written by lrcheck.Recorder (one JSON line per
    optimizer update), aligned by samples seen, and check `updates`, `lr` and `loss`.

    Exit codes: 0 the runs match, 1 they do not, 2 bad input (a missing file, a malformed line).
    """
    import lrcheck
    from lrcheck.spec import DIFF_DTYPE

    tolerances = Tolerances.for_dtype(DIFF_DTYPE, lr=tol_lr, loss=tol_loss)
    output = _Output(json=json_out, quiet=quiet)
    with output.running():
        report = lrcheck.diff(reference, candidate, tolerances=tolerances)
        saved = lrcheck.save_report(report, out if out is not None
                                    else DEFAULT_REPORTS / f"diff-{report.pair.name}")
        output.show(report, saved)
    raise typer.Exit(report.exit_code)


@app.command("suite")
def suite_command(
    file: Annotated[Path, typer.Argument(help="The suite: a TOML file with [defaults], [[pair]] and [[grid]] entries.", show_default=False)],
    out: Annotated[Path | None, _out_option("Report folder: a folder per pair, suite.json, summary.md, junit.xml, matrix.png. [default: ./lrcheck-reports/suite-<file name>]")] = None,
    baseline: Annotated[Path | None, typer.Option(help="Compare with this baseline: a changed LR trace, or accuracy/macro-F1 lower by more than tol_metrics, is a regression.")] = None,
    save_baseline: Annotated[Path | None, typer.Option(help="Save this run's LR trace digests and metrics as a baseline.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No table: only the closing lines.")] = False,
) -> None:
    """Run every pair of a suite file in one process and write a CI report.

    Exit codes: 0 every pair met its expectation (and no regression), 1 one did not, 2 bad input,
    3 a run crashed, 130 interrupted (the pair that was running is saved as "incomplete", the
    pairs after it are "not run", and the suite's report is written).
    """
    from lrcheck.suite.spec import load_suite

    suite = load_suite(file)
    raise typer.Exit(_suite(suite, out if out is not None
                            else DEFAULT_REPORTS / f"suite-{file.stem}",
                            baseline, save_baseline, quiet))


def _suite(suite: Suite, out: Path, baseline: Path | None, save_baseline: Path | None,
           quiet: bool) -> int:
    """Run ``suite`` into ``out`` as a live table (a terminal) or a line per pair, write its
    report (and ``save_baseline``), and tell how it went; the exit code."""
    from lrcheck.reports.files import prepare_file, prepare_out
    from lrcheck.suite.baseline import load_baseline
    from lrcheck.suite.run import prepare

    records = load_baseline(baseline) if baseline is not None else None
    folder = prepare_out(out)
    if save_baseline is not None:
        prepare_file(save_baseline, "--save-baseline")
    prepare(suite, folder)
    console = _stdout_console(SUITE_LOG_WIDTH)
    live = console.is_terminal and not quiet
    with _plots(True) as renderer:
        result = _run_suite(suite, folder, records, None if baseline is None else str(baseline),
                            renderer, console, live=live, quiet=quiet)
        _write_suite(result, folder, renderer, save_baseline)
    _suite_closing(result, folder, save_baseline, console, table=not (live or quiet))
    return result.exit_code


def _run_suite(suite: Suite, folder: Path, records: dict[str, dict[str, Any]] | None,
               baseline_path: str | None, renderer: Renderer, console: Console, *, live: bool,
               quiet: bool) -> SuiteResult:
    """Every pair of ``suite``, shown as a live table, or (not ``quiet``) a line per pair."""
    import time

    from lrcheck.reports.files import ReportFiles
    from lrcheck.reports.suite_table import SuiteBoard
    from lrcheck.suite.outcome import NOT_RUN
    from lrcheck.suite.run import run_suite

    board = SuiteBoard(suite)
    started = time.perf_counter()

    def done(index: int, outcome: PairOutcome) -> None:
        board.done(index, outcome)
        if live or quiet:
            return
        where = f"[{index + 1}/{len(suite.entries)}] {outcome.entry.name}:"
        console.print(f"{where} not run (interrupted)" if outcome.status == NOT_RUN else
                      f"{where} {outcome.verdict} (expect {outcome.entry.expect}) → "
                      f"{outcome.status}, {time.perf_counter() - started:.1f} s", markup=False)

    def run() -> SuiteResult:
        return run_suite(suite, folder, files=ReportFiles(renderer), baseline=records,
                         baseline_path=baseline_path,
                         on_progress=board.progress if live else None, on_done=done)

    if not live:
        return run()
    from rich.live import Live

    with Live(board, console=console, refresh_per_second=4):
        return run()


def _write_suite(result: SuiteResult, folder: Path, renderer: Renderer,
                 save_baseline: Path | None) -> None:
    """The suite's report in ``folder``, its baseline in ``save_baseline`` (not of a suite cut
    short, which would miss pairs: the one there is is kept), and its summary appended to
    ``$GITHUB_STEP_SUMMARY`` when that is set."""
    from lrcheck.reports.files import append_text, write_json, write_suite
    from lrcheck.suite.baseline import baseline_document

    write_suite(result, folder, renderer)
    renderer.finish()
    if save_baseline is not None and result.interrupted is None:
        write_json(save_baseline, baseline_document(result.outcomes, result.suite.path))
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        try:
            append_text(Path(summary), (folder / "summary.md").read_text(encoding="utf-8"))
        except SpecError as exc:  # the step summary is a courtesy: the verdict stands
            Console(stderr=True, highlight=False, soft_wrap=True).print(
                escape(f"lrcheck: warning: $GITHUB_STEP_SUMMARY: {exc}"))


def _suite_closing(result: SuiteResult, folder: Path, save_baseline: Path | None,
                   console: Console, *, table: bool) -> None:
    """The final table (unless it was shown live, or ``--quiet``), the verdict lines, and where
    the report and the baseline are."""
    from lrcheck.reports.suite_table import SuiteBoard, verdict_lines

    if table:
        console.print(SuiteBoard.finished(result))
    for line in verdict_lines(result):
        console.print(line)
    notes = [f"report: {folder}"]
    if save_baseline is not None:
        notes.append(f"baseline saved: {save_baseline}" if result.interrupted is None
                     else "baseline not saved: the suite was interrupted")
    Console(stderr=True, highlight=False, soft_wrap=True).print(escape(" · ".join(notes)))


@app.command("list")
def list_command() -> None:
    """List the tasks, schedulers, policies and frameworks."""
    console = Console(highlight=False)
    for title, headers, rows in (
        ("tasks (--task)", ("name", "what", "data"),
         [(t.name, t.description, t.source) for t in TASKS.values()]),
        ("schedulers (--scheduler)", ("name", "what"),
         [(s.name, s.description) for s in SCHEDULERS.values()]),
        ("policies (--policy)", ("name", "what", "who"),
         [(p.name, p.description, p.who) for p in POLICIES.values()]),
        ("frameworks (--framework)", ("name", "what", "settings"),
         [(f.name, f.description, ", ".join(f.settings)) for f in FRAMEWORKS.values()]),
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
    from lrcheck.runner.startup import hold

    hold()  # the garbage collector, until a run is built (runner.startup)
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
