"""``make bench``: lrcheck against bare-PyTorch baselines doing the same work, run alternately.

Every figure is a whole process timed by the operating system: wall time from fork to exit, and
peak resident memory from ``os.wait4``'s rusage (``ru_maxrss``: the largest single process of
the tree, the child or any descendant it waited for). Medians over ``--runs`` alternations.
The recording overhead is measured in one process instead (see ``record_child``).

    python benchmarks/bench.py [--runs 5] [--trace-steps 1000000] [--scale]
                               [--only help,compare,...,fsdp,deepspeed,lockstep,logs,grpo,tp]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PY = sys.executable
LRCHECK = [PY, "-m", "lrcheck"]
TARGETS = ("help", "compare", "record", "record-command", "trace", "suite", "suite-jobs", "ddp",
           "transformers", "lightning", "fsdp", "deepspeed", "lockstep", "logs", "resume", "grpo",
           "tp")


class RunFailed(Exception):
    pass


def timed(argv: list[str], ok: tuple[int, ...] = (0,)) -> tuple[float, float]:
    """(wall seconds, peak RSS in MiB) of ``argv`` run to completion, exiting with one of the
    codes ``ok``; output discarded."""
    with tempfile.TemporaryFile() as log:  # a file, not a pipe: a chatty child never blocks
        started = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        err = log.read().decode(errors="replace")
    if proc.returncode not in ok:
        print(f"{' '.join(argv)} exited {proc.returncode}:\n{err[-2000:]}", file=sys.stderr)
        raise RunFailed
    return wall, usage.ru_maxrss / 1024


def alternate(a: list[str], b: list[str], runs: int,
              a_ok: tuple[int, ...] = (0,)) -> tuple[tuple[float, float], tuple[float, float]]:
    """Medians of (wall, RSS) of ``a`` (exiting with one of ``a_ok``) and ``b``, run one after
    the other ``runs`` times."""
    ra, rb = [], []
    for _ in range(runs):
        ra.append(timed(a, a_ok))
        rb.append(timed(b))
    if not ra or not rb:
        raise RunFailed
    med = lambda rows, i: statistics.median(r[i] for r in rows)  # noqa: E731
    return (med(ra, 0), med(ra, 1)), (med(rb, 0), med(rb, 1))


class Table:
    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, str, str]] = []

    def add(self, what: str, lrcheck: str, bare: str, measured: float, target: float,
            unit: str = "×") -> None:
        mark = "met" if measured <= target else "MISSED"
        self.rows.append((what, lrcheck, bare, f"{measured:.3g}{unit} / {target:g}{unit}", mark))
        print(f"  {what}: {lrcheck} vs {bare} -> {measured:.3g}{unit} / {target:g}{unit} {mark}",
              file=sys.stderr, flush=True)

    def failed(self, what: str) -> None:
        self.rows.append((what, "-", "-", "not measured: a run failed (stderr)", "NOT MEASURED"))

    def print(self) -> None:
        head = ("figure", "lrcheck", "bare", "measured / target", "")
        widths = [max(len(r[i]) for r in [head, *self.rows]) for i in range(5)]
        for row in [head, tuple("-" * w for w in widths), *self.rows]:
            print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def wall_rss(w: float, r: float) -> str:
    return f"{w:.2f} s, {r:.0f} MiB"


# --- the targets -------------------------------------------------------------------------------

# Every workflow against its bare baseline (issue 11): wall time and peak memory.
WALL_TARGET, RSS_TARGET = 1.1, 1.2
# lrcheck compare --framework against a bare script training the same two runs in the same
# framework (issue 12): wall time.
FRAMEWORK_TARGET = 1.3
# lrcheck suite --jobs 2 against lrcheck's own sequential suite on 2 cores (issue 32): wall.
JOBS_TARGET = 0.75
# lrcheck run in lockstep against the user's two commands run bare one after the other, on three
# scripts (issue 37): wall.
LOCKSTEP_TARGET = 1.5
# One GRPO pair through lrcheck run, TRL's trainer recorded unmodified (issue 40): seconds.
GRPO_TARGET = 180.0
# One 4-process tensor-parallel pair through lrcheck run (issue 42): seconds.
TP_TARGET = 300.0


def add_workflow(table: Table, what: str, lr: tuple[float, float],
                 bare: tuple[float, float], wall_target: float = WALL_TARGET) -> None:
    """Two rows: ``what``'s wall time and its peak RSS, each against the bare run's."""
    table.add(f"{what} wall", wall_rss(*lr), wall_rss(*bare), lr[0] / bare[0], wall_target)
    table.add(f"{what} peak RSS", f"{lr[1]:.0f} MiB", f"{bare[1]:.0f} MiB", lr[1] / bare[1],
              RSS_TARGET)

def bench_help(table: Table, runs: int) -> None:
    rows = [timed(LRCHECK + ["--help"]) for _ in range(runs)]
    bare = [timed([PY, "-c", "pass"]) for _ in range(runs)]
    wall = statistics.median(r[0] for r in rows)
    table.add("lrcheck --help wall", f"{wall:.3f} s",
              f"python -c pass {statistics.median(r[0] for r in bare):.3f} s", wall, 0.3, " s")


def bench_compare(table: Table, runs: int, out: Path) -> None:
    lr, bare = alternate(LRCHECK + ["compare", "--quiet", "--out", str(out / "compare")],
                         [PY, str(HERE / "baseline.py")], runs)
    add_workflow(table, "compare (default pair)", lr, bare)


def bench_record(table: Table, runs: int) -> None:
    out = subprocess.run([PY, str(Path(__file__)), "--record-child", str(max(3 * runs, 9))],
                         check=True, capture_output=True, text=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    # The figure is the time inside Recording.update over the rest of the same loops: stable to
    # 0.1 % from run to run here, where the A/B ratio of separate loops moves by several %.
    table.add("recording overhead in the plain loop (time in Recording.update)",
              f"{res['with']:.3f} s loop, A/B {100 * res['overhead']:+.1f} %",
              f"{res['without']:.3f} s loop (no update recorded)", 100 * res["inside"], 3.0,
              " %")


def bench_record_command(table: Table, runs: int) -> None:
    out = subprocess.run([PY, str(HERE / "record_overhead.py"), str(max(runs, 5))], check=True,
                         capture_output=True, text=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    # As for bench_record: the time inside the hooks over the rest of the loop.
    table.add("lrcheck record, LR only (2.1 M-parameter MLP; time in the hooks)",
              f"{res['lr_s']:.3f} s, A/B {100 * res['lr_ab']:+.1f} %", f"{res['bare_s']:.3f} s",
              100 * res["lr_overhead"], 3.0, " %")
    table.add(f"lrcheck record, fingerprint every {res['every']} (time in the hooks)",
              f"{res['fingerprint_s']:.3f} s, A/B {100 * res['fingerprint_ab']:+.1f} %",
              f"{res['bare_s']:.3f} s", 100 * res["fingerprint_overhead"], 5.0, " %")


def record_child(runs: int) -> None:
    """In this process: ``plain._Loop.run`` of the default pair's two runs, timed with the real
    ``Recording.update`` and with one that records nothing (the loop itself still reads the LR
    and sums the loss: a few Python operations per update), alternated ``runs`` times (each
    going first in turn). The overhead
    is the median of the alternations' ratios (with / without - 1), which a machine's slow drift
    affects less than a ratio of medians. As a cross-check immune to run-to-run noise, ``inside``
    is the time spent in ``Recording.update`` over the rest of the loop, in the same runs."""
    import torch

    import lrcheck.runner.plain as plain
    from lrcheck.experiments.tasks import TASKS
    from lrcheck.runner.recording import Recording
    from lrcheck.spec import RunSpec

    torch.set_num_threads(1)  # as lrcheck trains on the CPU (runner/local.py, CPU_THREADS)
    ref = RunSpec(task="digits", bs=32, accum=1, device="cpu")
    cand = RunSpec(task="digits", bs=16, accum=2, device="cpu")
    data = TASKS["digits"].load(0, 2000)
    real_record, real_loop = Recording.update, plain._Loop.run
    spent: list[float] = []
    inside: list[float] = []

    def timed_loop(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return real_loop(self, *args, **kwargs)
        finally:
            spent.append(time.perf_counter() - started)

    def timed_record(self, *args, **kwargs) -> None:
        started = time.perf_counter()
        try:
            return real_record(self, *args, **kwargs)
        finally:
            inside.append(time.perf_counter() - started)

    def no_record(self, *args, **kwargs) -> None:
        return None

    plain._Loop.run = timed_loop
    for spec in (ref, cand):  # warm-up: first optimizer step, sklearn metrics import
        plain.train(spec, data, device="cpu")
    ratios, shares, times = [], [], {"with": [], "without": []}
    for n in range(runs):
        for mode in ("with", "without") if n % 2 == 0 else ("without", "with"):  # either first
            Recording.update = timed_record if mode == "with" else no_record
            spent.clear()
            inside.clear()
            for spec in (ref, cand):
                plain.train(spec, data, device="cpu")
            times[mode].append(sum(spent))
            if mode == "with":
                shares.append(sum(inside) / (sum(spent) - sum(inside)))
        ratios.append(times["with"][-1] / times["without"][-1] - 1)
    print(json.dumps({"with": statistics.median(times["with"]),
                      "without": statistics.median(times["without"]),
                      "overhead": statistics.median(ratios),
                      "inside": statistics.median(shares)}))


def bench_trace(table: Table, runs: int, out: Path, steps: int) -> None:
    # bs 1, accum 1: reference and candidate each make `steps` updates, one scheduler.step()
    # each; the bare process steps the same two schedules as many times.
    lr, bare = alternate(
        LRCHECK + ["trace", "--samples", str(steps), "--bs", "1", "--quiet", "--out",
                   str(out / "trace")],
        [PY, str(Path(__file__)), "--bare-trace", str(steps)], runs)
    add_workflow(table, f"trace, {steps:,} steps per run,", lr, bare)


def bare_trace(steps: int) -> None:
    """Two raw loops (reference and candidate) of ``steps`` ``scheduler.step()`` calls on
    lrcheck's default schedule (cosine, warmup 10 % as k/W), SGD with two param groups."""
    sys.path.insert(0, str(HERE))
    import torch
    from baseline import make_schedule

    for _ in range(2):
        lin = torch.nn.Linear(1, 1)
        opt = torch.optim.SGD([{"params": [lin.weight]}, {"params": [lin.bias]}], lr=0.05,
                              momentum=0.9)
        sched = make_schedule(opt, "cosine", steps, round(0.1 * steps))
        lrs = []
        opt.step()
        for _ in range(steps):
            lrs.extend(g["lr"] for g in opt.param_groups)
            sched.step()


# Reading a run's TensorBoard log of 100,000 steps (issue 39): seconds.
LOGS_STEPS, LOGS_TARGET = 100_000, 3.0


def bench_logs(table: Table, runs: int, out: Path) -> None:
    """``logs_read_100k``: ``read_logs`` of a SummaryWriter log of 100,000 steps of ``lr``,
    ``loss`` and ``grad_norm`` (written once, not timed), in a process of its own, median of
    ``runs``; the bare figure is tensorboard's own ``EventAccumulator`` loading it."""
    folder = out / "tb-100k"
    subprocess.run([PY, str(Path(__file__)), "--write-logs", str(folder)], check=True)
    ours = [float(subprocess.run([PY, str(Path(__file__)), "--read-logs", str(folder)],
                                 check=True, capture_output=True, text=True).stdout)
            for _ in range(runs)]
    bare = [float(subprocess.run([PY, str(Path(__file__)), "--read-logs", str(folder),
                                  "--accumulator"], check=True, capture_output=True,
                                 text=True).stdout) for _ in range(runs)]
    wall = statistics.median(ours)
    table.add(f"logs_read_100k: read_logs of {LOGS_STEPS:,} TensorBoard steps x 3 tags",
              f"{wall:.2f} s", f"EventAccumulator {statistics.median(bare):.2f} s", wall,
              LOGS_TARGET, " s")


def write_logs(folder: str) -> None:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(folder, max_queue=10_000, flush_secs=600)
    for k in range(LOGS_STEPS):
        writer.add_scalar("lr", 0.1 * (1 - k / LOGS_STEPS), k)
        writer.add_scalar("loss", 1.0 / (k + 1), k)
        writer.add_scalar("grad_norm", 0.5, k)
    writer.close()


def read_logs_seconds(folder: str, accumulator: bool) -> None:
    """Print the seconds ``read_logs`` (or ``EventAccumulator``) takes on ``folder``, imports
    included."""
    started = time.perf_counter()
    if accumulator:
        from tensorboard.backend.event_processing import event_accumulator as ea

        events = ea.EventAccumulator(folder, size_guidance={ea.SCALARS: 0})
        events.Reload()
        assert all(len(events.Scalars(t)) == LOGS_STEPS for t in events.Tags()["scalars"])
    else:
        from lrcheck.logs.read import read_logs

        run = read_logs(Path(folder))
        assert all(len(s.steps) == LOGS_STEPS for s in run.series.values())
    print(time.perf_counter() - started)


def bench_suite(table: Table, runs: int, out: Path) -> None:
    lr, bare = alternate(
        LRCHECK + ["suite", str(HERE / "suite-12.toml"), "--quiet", "--out", str(out / "suite")],
        [PY, str(HERE / "suite_baseline.py")], runs)
    add_workflow(table, "suite of 12 pairs (3 shared references)", lr, bare)


def bench_suite_jobs(table: Table, runs: int, out: Path) -> None:
    """The same suite in 2 worker processes (``--jobs 2``) against lrcheck's own sequential
    run, alternated (issue 32): the goal is 0.75x its wall time on 2 cores, each process's peak
    memory within 1.2x the bare baseline's (measured beside it, in ``bench_suite``)."""
    suite = LRCHECK + ["suite", str(HERE / "suite-12.toml"), "--quiet", "--out"]
    jobs, sequential = alternate(suite + [str(out / "suite-jobs"), "--jobs", "2"],
                                 suite + [str(out / "suite-sequential")], runs)
    table.add("suite of 12 pairs, --jobs 2 against lrcheck's sequential run, wall",
              wall_rss(*jobs), "sequential " + wall_rss(*sequential),
              jobs[0] / sequential[0], JOBS_TARGET)


def bench_ddp(table: Table, runs: int, out: Path) -> None:
    lr, bare = alternate(
        LRCHECK + ["compare", "--nproc", "2", "--bs", "8", "--accum", "2", "--quiet", "--out",
                   str(out / "ddp")],
        [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(HERE / "ddp_baseline.py")], runs)
    add_workflow(table, "2-process pair (--nproc 2 --bs 8 --accum 2)", lr, bare)


def bench_framework(table: Table, runs: int, out: Path, framework: str) -> None:
    lr, bare = alternate(
        LRCHECK + ["compare", "--framework", framework, "--quiet", "--out",
                   str(out / framework)],
        # The default digits pair fails in both frameworks (docs/frameworks.md): exit 1 is its
        # answer, not a failed run.
        [PY, str(HERE / "framework_baseline.py"), framework], runs, a_ok=(0, 1))
    add_workflow(table, f"--framework {framework} (default pair)", lr, bare, FRAMEWORK_TARGET)


def bench_sharded(table: Table, runs: int, out: Path, engine: str) -> None:
    """``--framework fsdp`` (2 processes, bs 8 × accum 2, float64; the default digits pair
    passes) and ``--framework deepspeed`` (one process, bs 16 × accum 2, float32; it fails at
    the last window, exit 1) against ``sharded_baseline.py``'s same two runs in the engine."""
    baseline = str(HERE / "sharded_baseline.py")
    if engine == "fsdp":
        flags = ["--nproc", "2", "--bs", "8", "--accum", "2"]
        bare = [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                baseline, "fsdp"]
    else:
        flags, bare = ["--dtype", "float32"], [PY, baseline, "deepspeed"]
    lr, bare_figures = alternate(
        LRCHECK + ["compare", "--framework", engine, *flags, "--quiet", "--out",
                   str(out / engine)], bare, runs, a_ok=(0, 1))
    add_workflow(table, f"--framework {engine} (digits, {' '.join(flags)})", lr, bare_figures,
                 FRAMEWORK_TARGET)


def bench_lockstep(table: Table, runs: int) -> None:
    """``lrcheck run`` in lockstep on ``lockstep_cost.SCRIPTS``' three users' scripts against
    the two commands run bare one after the other (issue 37: at most 1.5x)."""
    sys.path.insert(0, str(HERE))
    import lockstep_cost

    for name in lockstep_cost.SCRIPTS:
        got = lockstep_cost.measure(name, runs)
        lock, bare = got["lrcheck run (lockstep)"], got["bare one after the other"]
        assert isinstance(lock, dict) and isinstance(bare, dict)
        table.add(f"lrcheck run in lockstep ({name}) against the two commands bare, wall",
                  wall_rss(lock["wall"], lock["rss"]), wall_rss(bare["wall"], bare["rss"]),
                  lock["wall"] / bare["wall"], LOCKSTEP_TARGET)


def bench_resume(table: Table, runs: int, out: Path) -> None:
    """``lrcheck run --interrupt-at`` against the same pair uninterrupted (resume_cost.py)."""
    sys.path.insert(0, str(HERE))
    import resume_cost

    resume_cost.bench(table, runs, out, alternate, wall_rss)


def bench_grpo(table: Table, runs: int, out: Path) -> None:
    """``lrcheck run`` of a user's GRPO script (tests/fixtures/user_grpo.py: TRL's GRPOTrainer,
    a tiny Llama, generation by the model) at bs 8 against bs 4 × accum 2, 3 updates, in
    lockstep: the wall time of the whole pair, against 3 minutes."""
    script = str(HERE.parent / "tests" / "fixtures" / "user_grpo.py")
    bench_pair(table, runs, out / "grpo", [PY, script, "--bs", "8"],
               [PY, script, "--bs", "4", "--accum", "2"], [],
               "one GRPO pair (TRL, bs 8 vs 4 x 2, 3 updates)", GRPO_TARGET)


def bench_tp(table: Table, runs: int, out: Path) -> None:
    """``lrcheck run --free`` of a user's torchtitan-style training (tests/fixtures/user_tp.py:
    a tiny Llama, float64, 4 updates) on 4 gloo processes, dp 2 × tp 2, bs 2 × accum 2 each,
    against one process at bs 8: the wall time of the whole pair, against 5 minutes."""
    script = str(HERE.parent / "tests" / "fixtures" / "user_tp.py")
    bench_pair(table, runs, out / "tp", [PY, script, "--bs", "8"],
               [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
                script, "--dp", "2", "--tp", "2", "--bs", "2", "--accum", "2"], ["--free"],
               "one dp 2 x tp 2 pair on 4 processes (bs 8 vs 2 x 2 per rank, 4 updates)",
               TP_TARGET)


def bench_pair(table: Table, runs: int, out: Path, ref: list[str], cand: list[str],
               flags: list[str], what: str, target: float) -> None:
    """``runs`` times ``lrcheck run REF CAND`` (passing: exit 0), its median wall time and peak
    memory against ``target`` seconds."""
    import shlex

    got = [timed(LRCHECK + ["run", shlex.join(ref), shlex.join(cand), *flags, "--out",
                            str(out / str(i))]) for i in range(runs)]
    wall, rss = (statistics.median(g[i] for g in got) for i in (0, 1))
    table.add(f"lrcheck run, {what}, wall", wall_rss(wall, rss), "-", wall, target, " s")


# --- scale -------------------------------------------------------------------------------------

def scale(out: Path) -> None:
    print("\ncompare (digits, default pair) vs epochs: one run each")
    print("| epochs | updates (ref + cand) | wall s | training s (result.json) | ms per update |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for epochs in (1, 4, 16):
        folder = out / f"scale-compare-{epochs}"
        wall, _ = timed(LRCHECK + ["compare", "--quiet", "--epochs", str(epochs), "--out",
                                   str(folder)])
        res = json.loads((folder / "result.json").read_text())
        runs = res["runs"].values()
        updates = sum(len(r["updates"]) for r in runs)
        train = sum(r.get("seconds", 0.0) for r in runs)
        print(f"| {epochs} | {updates} | {wall:.2f} | {train:.2f} | {1e3 * train / updates:.3f} |")
    print("\ntrace (cosine, bs 1) vs steps: one run each")
    print("| steps per run | wall s | simulation s (both runs) | µs per step |")
    print("| ---: | ---: | ---: | ---: |")
    for steps in (1_000, 10_000, 100_000, 1_000_000):
        folder = out / f"scale-trace-{steps}"
        wall, _ = timed(LRCHECK + ["trace", "--samples", str(steps), "--bs", "1", "--quiet",
                                   "--out", str(folder)])
        res = json.loads((folder / "result.json").read_text())
        sim = sum(r.get("seconds", 0.0) for r in res["runs"].values())
        print(f"| {steps:,} | {wall:.2f} | {sim:.3f} | {1e6 * sim / (2 * steps):.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="alternations per figure")
    parser.add_argument("--only", default=",".join(TARGETS), help="comma-separated figures")
    parser.add_argument("--trace-steps", type=int, default=1_000_000)
    parser.add_argument("--scale", action="store_true", help="also the scale tables")
    parser.add_argument("--record-child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--bare-trace", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--write-logs", help=argparse.SUPPRESS)
    parser.add_argument("--read-logs", help=argparse.SUPPRESS)
    parser.add_argument("--accumulator", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write_logs:
        return write_logs(args.write_logs)
    if args.read_logs:
        return read_logs_seconds(args.read_logs, args.accumulator)
    if args.record_child:
        return record_child(args.record_child)
    if args.bare_trace:
        return bare_trace(args.bare_trace)
    import torch

    with open("/proc/cpuinfo") as info:
        cpu = next((line.split(":", 1)[1].strip() for line in info
                    if line.startswith("model name")), "?")
    print(f"machine: {os.cpu_count()} CPUs ({cpu}), torch {torch.__version__}, "
          f"{torch.get_num_threads()} torch threads; {args.runs} runs each, medians")
    table = Table()
    only = set(args.only.split(","))
    with tempfile.TemporaryDirectory(prefix="lrcheck-bench-") as tmp:
        out = Path(tmp)
        figures = {"help": lambda: bench_help(table, args.runs),
                   "compare": lambda: bench_compare(table, args.runs, out),
                   "record": lambda: bench_record(table, args.runs),
                   "record-command": lambda: bench_record_command(table, args.runs),
                   "trace": lambda: bench_trace(table, args.runs, out, args.trace_steps),
                   "suite": lambda: bench_suite(table, args.runs, out),
                   "suite-jobs": lambda: bench_suite_jobs(table, args.runs, out),
                   "ddp": lambda: bench_ddp(table, args.runs, out),
                   "transformers": lambda: bench_framework(table, args.runs, out,
                                                           "transformers"),
                   "lightning": lambda: bench_framework(table, args.runs, out, "lightning"),
                   "fsdp": lambda: bench_sharded(table, args.runs, out, "fsdp"),
                   "deepspeed": lambda: bench_sharded(table, args.runs, out, "deepspeed"),
                   "lockstep": lambda: bench_lockstep(table, args.runs),
                   "logs": lambda: bench_logs(table, args.runs, out),
                   "resume": lambda: bench_resume(table, args.runs, out),
                   "grpo": lambda: bench_grpo(table, args.runs, out),
                   "tp": lambda: bench_tp(table, args.runs, out)}
        for name in TARGETS:
            if name in only:
                try:
                    figures[name]()
                except RunFailed:
                    table.failed(name)
        table.print()
        if args.scale:
            scale(out)


if __name__ == "__main__":
    main()
