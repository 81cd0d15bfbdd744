"""``lrcheck compare``: train the candidate and the reference and check that they train alike."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from lrcheck.cli.ending import noted, speaks
from lrcheck.cli.options import (
    DEFAULT,
    DeterministicOpt,
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
    parse_updates,
    setting_option,
)
from lrcheck.cli.output import (
    Output,
    ProgressBar,
    plots,
    prepared,
    save_and_show,
    saving_incomplete,
)
from lrcheck.experiments.tasks import GENERATED_SAMPLES, TASKS
from lrcheck.plan.frameworks import FRAMEWORKS
from lrcheck.spec import (
    DEFAULT_TIMEOUT_S,
    Amp,
    CompareOptions,
    Device,
    Dtype,
    LightningSampler,
    LossNorm,
    Optimizer,
    PairSpec,
    RunSpec,
    ToleranceOverrides,
    TrainerLoss,
    reference_framework,
)

if TYPE_CHECKING:
    from lrcheck.api import Report


HELP = """Train the candidate and the reference on the same data and check that they train alike.

Under torchrun (torchrun --nproc-per-node 2 -m lrcheck compare ...) the candidate runs on
every rank and rank 0 alone trains the reference and reports; every rank exits with the
verdict's code.

Exit codes: 0 every check passed, 1 a check failed (a scheduler.step() that raises stops its
run and fails `updates`), 2 bad input, 3 a run crashed otherwise or hung, 130 interrupted
(what was recorded is saved with verdict "incomplete").
"""

def compare_command(  # one parameter per flag: the body takes them all, by name
    accum: Annotated[int, typer.Option(help="Micro-batches per optimizer update.")] = DEFAULT.accum,
    bs: Annotated[int, typer.Option(help="Micro-batch size: samples one process feeds forward at once.")] = DEFAULT.bs,
    ref_bs: Annotated[int | None, typer.Option(help="The reference's batch size (accum 1); bs·accum·nproc must equal ref-bs·ref-nproc. [default: bs·accum·nproc / ref-nproc]")] = None,
    nproc: Annotated[int | None, typer.Option(help="Processes the candidate runs as, launched through torchrun (gloo on CPU, nccl with one GPU each on CUDA). Inside torchrun, its world size. [default: 1]")] = None,
    ref_nproc: Annotated[int, typer.Option(help="Processes the reference runs as (more than 1: launched through torchrun too).")] = 1,
    timeout: Annotated[float, typer.Option(help="Multi-process runs only: seconds a run launched through torchrun may go without finishing an optimizer update (start-up counts); then every process is stopped and lrcheck exits 3. A run in this process has no timeout.")] = DEFAULT_TIMEOUT_S,
    epochs: Annotated[int, typer.Option(help="Epochs over the training split.")] = DEFAULT.epochs,
    task: Annotated[str, typer.Option(help=f"What is trained: {choices(TASKS)}.")] = DEFAULT.task,
    samples: Annotated[int | None, typer.Option(help=f"Samples generated for --task {' or '.join(t.name for t in TASKS.values() if t.generated)} (the other tasks have a fixed size). [default: {GENERATED_SAMPLES}]")] = DEFAULT.samples,
    scheduler: SchedulerOpt = DEFAULT.scheduler,
    warmup: WarmupOpt = DEFAULT.warmup,
    lr: LrOpt = DEFAULT.lr,
    optimizer: Annotated[Optimizer, typer.Option(help=f"Optimizer: {choices(Optimizer)} (sgd has momentum 0.9).")] = DEFAULT.optimizer,
    policy: PolicyOpt = DEFAULT.policy,
    framework: Annotated[str, typer.Option(help=f"What trains both runs, for real: {choices(FRAMEWORKS)}. A framework decides when the optimizer and the scheduler step, how losses are scaled and how an epoch ends; lrcheck holds the model, its weights, the data order, the optimizer and the schedule fixed. See docs/frameworks.md.")] = DEFAULT.framework,
    ref_framework: Annotated[str | None, typer.Option(help="What trains the reference. [default: --framework; plain compares against lrcheck's own exact loop]")] = None,
    drop_last: Annotated[bool, setting_option("drop_last")] = DEFAULT.drop_last,
    trainer_loss: Annotated[TrainerLoss, setting_option("trainer_loss")] = DEFAULT.trainer_loss,
    even_batches: Annotated[bool, setting_option("even_batches")] = DEFAULT.even_batches,
    lightning_sampler: Annotated[LightningSampler, setting_option("lightning_sampler")] = DEFAULT.lightning_sampler,
    zero_stage: Annotated[int, setting_option("zero_stage")] = DEFAULT.zero_stage,
    scheduler_stepped_too: Annotated[bool, setting_option("scheduler_stepped_too")] = DEFAULT.scheduler_stepped_too,
    tail: TailOpt = DEFAULT.tail,
    loss_norm: Annotated[LossNorm, typer.Option(help=f"Loss normalisation: {choices(LossNorm)} (global: sum / samples of the whole effective batch; mean: per-micro-batch mean / accum).")] = DEFAULT.loss_norm,
    seed: Annotated[int, typer.Option(help="Seed of the split, the initial weights and the data order.")] = DEFAULT.seed,
    dtype: Annotated[Dtype, typer.Option(help=f"Floating-point type: {choices(Dtype)} (--framework ludwig trains in float32 whatever is asked; --framework deepspeed refuses float64).")] = DEFAULT.dtype,
    device: Annotated[Device, typer.Option(help=f"Device: {choices(Device)}.")] = DEFAULT.device,
    amp: Annotated[Amp, typer.Option(help=f"Mixed precision: {choices(Amp)} (fp16: float16 autocast and a GradScaler that skips steps with non-finite gradients, lrcheck's own loop; bf16: --framework deepspeed's bf16.enabled, a bfloat16 model on float32 master weights; both need --dtype float32).")] = DEFAULT.amp,
    resume_at: Annotated[int | None, typer.Option(metavar="K", help="Stop the candidate after update K, save a checkpoint (state_dicts, RNG, data position), build everything again from scratch, load it and go on. --framework ludwig: stop Ludwig after update K as its Ctrl-C handler does, resume through its model_resume_path, against the same Ludwig run uninterrupted.")] = None,
    resume_at_micro: Annotated[int | None, typer.Option(metavar="M", help="The same after micro-batch M (counted over the run), in the middle of an accumulation window.")] = None,
    inject_overflow: Annotated[str, typer.Option(metavar="K[,K...]", help="Make the gradients of these updates (both runs) non-finite, so the GradScaler skips them; needs --amp fp16.")] = "",
    deterministic: DeterministicOpt = DEFAULT.deterministic,
    tol_lr: TolLrOpt = None,
    tol_params: Annotated[float | None, typer.Option(help="params check: max|Δp| / max|p| after every update. [default: 1e-9 float64, 1e-4 float32]")] = None,
    tol_loss: Annotated[float | None, typer.Option(help="loss check: |Δloss| / |loss| per update (below 1/100 of the first loss, relative to that). [default: 1e-9 float64, 1e-3 float32]")] = None,
    tol_metrics: Annotated[float | None, typer.Option(help="metrics check: absolute difference of accuracy and macro-F1. [default: 0.01]")] = None,
    fast: Annotated[bool, typer.Option("--fast", help="Skip the noise floor: where the candidate cannot run in lockstep with the reference (a framework's own loop), params and loss are otherwise judged against a twin of the reference trained for it (one more run); with --fast, against the tolerances alone.")] = False,
    out: Annotated[Path | None, out_option("Report folder. [default: ./lrcheck-reports/<pair name>]")] = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """``HELP``: the flags as ``CompareOptions`` (checked by the library, world first)."""
    from lrcheck.api import check_processes

    options = noted(lambda: CompareOptions(RunSpec(
        world=check_processes(ref_nproc, nproc, timeout), accum=accum, bs=bs, epochs=epochs,
        task=task, samples=samples, scheduler=scheduler, warmup=warmup, lr=lr,
        optimizer=optimizer, policy=policy, framework=framework, drop_last=drop_last,
        trainer_loss=trainer_loss, even_batches=even_batches,
        lightning_sampler=lightning_sampler, zero_stage=zero_stage,
        scheduler_stepped_too=scheduler_stepped_too, tail=tail, loss_norm=loss_norm, seed=seed,
        dtype=dtype, device=device, amp=amp, resume_at=resume_at, resume_at_micro=resume_at_micro,
        inject_overflow=parse_updates("--inject-overflow", inject_overflow),
        deterministic=deterministic), ref_bs=ref_bs, ref_world=ref_nproc,
        ref_framework=reference_framework(policy, ref_framework), fast=fast, timeout=timeout,
        tolerances=ToleranceOverrides(tol_lr, tol_params, tol_loss, tol_metrics)))
    raise typer.Exit(_run(options, out, Output(json=json_out, quiet=quiet, speaks=speaks())))


def _run(options: CompareOptions, out: Path | None, output: Output) -> int:
    """The pair ``options`` describe (``api.comparison_pair``, which checks them as it checks
    ``lrcheck.compare()``'s keywords and a suite's ``[[pair]]``), trained, checked, saved and
    shown; the exit code."""
    from lrcheck.api import comparison_pair

    pair = noted(lambda: comparison_pair(options))
    with output.running():
        return _compare(pair, out, options.timeout, output)


def _compare(pair: PairSpec, out: Path | None, timeout: float | None, output: Output) -> int:
    """Train and check ``pair`` with a progress bar, save the report and show it; the exit
    code (under torchrun, every rank's: rank 0's verdict)."""
    from lrcheck.api import run_comparison

    output.starting(f"loading {pair.candidate.task} and building the runs")
    with (prepared(pair, out, create=output.speaks) as folder,
          plots(output.speaks) as renderer, saving_incomplete(folder, output),
          ProgressBar(output.progress) as bar):

        def on_report(report: Report) -> None:
            bar.close()
            save_and_show(report, folder, renderer, output)

        return run_comparison(pair, on_report, progress=bar.update, timeout=timeout)
