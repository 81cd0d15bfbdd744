"""Cost of ``lrcheck trace`` per ``scheduler.step()``, against the scheduler's own bare loop.

For each schedule and policy: ``simulate`` the candidate of the issue's example
(bs 4 · accum 8 · 64 processes, 2048 samples per update), then build the same optimizer and
scheduler again and time ``for _ in range(steps): scheduler.step()`` for the same number of
steps. The ratio is (simulation time per step) / (bare step time); 1.0 would mean the simulation
adds nothing to the scheduler's own work.

    python benchmarks/trace_speed.py [--samples 50000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time
import warnings

from lrcheck.experiments.schedulers import make_scheduler
from lrcheck.plan.steps import plan_steps, schedule_context
from lrcheck.runner.build import make_optimizer
from lrcheck.runner.simulate import simulate
from lrcheck.spec import RunSpec

SCHEDULERS = ("cosine", "linear", "wsd", "onecycle", "constant")
POLICIES = ("per-update", "per-micro-batch")


def bare_seconds(spec: RunSpec, steps: int) -> float:
    """The scheduler's own ``step()`` loop, ``steps`` times, on the simulation's optimizer."""
    import torch

    plan = plan_steps(spec.samples, spec.bs, spec.accum, spec.world, spec.epochs, spec.tail)
    optimizer = make_optimizer(spec, torch.nn.Linear(1, 1))
    scheduler = make_scheduler(spec.scheduler, optimizer, schedule_context(plan, spec.policy,
                                                                          spec.warmup))
    optimizer.step()
    step = scheduler.step
    started = time.perf_counter()
    for _ in range(steps):
        step()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=50_000_000)
    parser.add_argument("--repeat", type=int, default=3, help="best of this many")
    args = parser.parse_args()
    # torch's "scheduler.step() before optimizer.step()" warning, expected for per-micro-batch.
    warnings.simplefilter("ignore")
    print(f"{'scheduler':<10} {'policy':<16} {'steps':>9} {'bare µs':>8} {'trace µs':>9} "
          f"{'ratio':>6}")
    ratios = []
    for policy in POLICIES:
        for name in SCHEDULERS:
            spec = RunSpec(task="synthetic", bs=4, accum=8, world=64, epochs=1, scheduler=name,
                           policy=policy, samples=args.samples, device="cpu")
            sims = [simulate(spec) for _ in range(args.repeat)]
            steps = sims[0].schedule.scheduler_steps
            sim = min(s.seconds for s in sims) / steps
            bare = min(bare_seconds(spec, steps) for _ in range(args.repeat)) / steps
            ratios.append(sim / bare)
            print(f"{name:<10} {policy:<16} {steps:>9,} {1e6 * bare:>8.2f} {1e6 * sim:>9.2f} "
                  f"{sim / bare:>6.2f}")
    print(f"ratio: median {sorted(ratios)[len(ratios) // 2]:.2f}, max {max(ratios):.2f}")


if __name__ == "__main__":
    main()
