"""``lrcheck record``'s overhead inside a training loop: the same loop (an MLP of 2.1 M
parameters, AdamW, bs 64, one torch thread, as a user's CPU run) timed without the global
optimizer hooks, with them recording the LR only (``--fingerprint-every 0``) and with the
default fingerprint (every ``DEFAULT_EVERY`` updates), alternated. The figure is the time spent
inside the hooks over the rest of the same loop (stable from run to run, where the A/B ratio of
separate loops moves by several % on a shared machine; both are printed, medians). One JSON
line. Process start-up (the sitecustomize, which imports nothing before torch) is not in
the figure: it is the same few milliseconds for any command.

The recorded modes count the cadence's calls too (``count_calls``: the loop's backward and
zero_grad go through its wrappers); their cost is outside the hooks, so it is measured apart:
``counted_call_us``, what one counted call adds (a wrapped no-op against the bare one), and
``counted_overhead``, that × the loop's 2 counted calls per update over the bare update; and
``losses_us`` / ``losses_overhead``, what keeping and reading the loss each backward was called
on (``record.losses``) costs an update of one micro-batch.

``all`` records everything issue 29 adds as well: the default fingerprint, the cadence and
the taps of ``record.taps`` (every module call through the wrapped ``Module.__call__``, each
training forward's row identities, the loss's hook and the weights' transfer at the update).
Its figure is the time inside the hooks and inside the taps' own work (``Taps.forward``,
``Taps.loss``, the hook in the backward pass, ``Taps.take``) over the rest of the loop."""

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

from lrcheck.record import taps
from lrcheck.record.calls import count_calls, counting
from lrcheck.record.launch import DEFAULT_EVERY
from lrcheck.record.process import ProcessRecorder


def loop(updates: int) -> float:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, total_iters=updates)
    x, y = torch.randn(64, 1024), torch.randint(0, 10, (64,))
    started = time.perf_counter()
    for _ in range(updates):
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
    return time.perf_counter() - started


def timed(mode: str, updates: int, folder: Path, inside: list[float]) -> float:
    if mode == "bare":
        return loop(updates)
    recorder = ProcessRecorder(folder / mode, None, 0 if mode == "lr" else DEFAULT_EVERY)
    (folder / mode).mkdir(exist_ok=True)
    spent = [0.0]

    def clocked(hook):
        def run(*args):
            started = time.perf_counter()
            hook(*args)
            spent[0] += time.perf_counter() - started
        return run

    handles = [register_optimizer_step_pre_hook(clocked(recorder.pre)),
               register_optimizer_step_post_hook(clocked(recorder.post))]
    uncount = count_calls(recorder)
    untap = lambda: None  # noqa: E731
    if mode == "all":
        for name in ("forward", "loss"):
            setattr(recorder.taps, name, clocked(getattr(recorder.taps, name)))
        original_add = torch.Tensor.register_hook

        def clocked_hook(tensor, hook):  # the loss's hook, in the backward pass
            return original_add(tensor, clocked(hook))

        torch.Tensor.register_hook = clocked_hook
        untap_taps = taps.tap(recorder.taps)

        def untap() -> None:
            untap_taps()
            torch.Tensor.register_hook = original_add
    try:
        wall = loop(updates)
        inside.append(spent[0] / (wall - spent[0]))
        return wall
    finally:
        untap()
        uncount()
        for handle in handles:
            handle.remove()
        recorder.close()
        for path in (folder / mode).iterdir():
            path.unlink()


def counted_call_us(calls: int = 200_000) -> float:
    """What counting adds to one call, in µs: a wrapped no-op against the bare one, medians."""
    class Owner:
        @staticmethod
        def call() -> None:
            return None

    bare = Owner.call

    def per_call(fn) -> float:
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - started) / calls * 1e6

    totals = [0]
    undo = counting(Owner, "call", lambda args, kwargs, result: totals.__setitem__(0, 1))
    try:
        counted = Owner.call
        gaps = [per_call(counted) - per_call(bare) for _ in range(5)]
    finally:
        undo()
    return statistics.median(gaps)


def losses_us(updates: int = 20_000) -> float:
    """What ``record.losses`` adds to an update of one micro-batch, in µs: keeping the loss
    backward was called on (in the backward's counter, outside the hooks) and reading it at the
    update (inside the post-hook, in the modes' figures already), medians."""
    from lrcheck.record.losses import Losses

    losses = Losses()
    loss = torch.nn.Linear(4, 1)(torch.ones(2, 4)).pow(2).mean()

    def per_update() -> float:
        started = time.perf_counter()
        for _ in range(updates):
            losses.backward((loss,), {})
            losses.take(1.0)
        return (time.perf_counter() - started) / updates * 1e6

    return statistics.median(per_update() for _ in range(5))


def main(runs: int, updates: int) -> None:
    torch.set_num_threads(1)
    modes = ("bare", "lr", "fingerprint", "all")
    ratios: dict[str, list[float]] = {"lr": [], "fingerprint": [], "all": []}
    inside: dict[str, list[float]] = {"lr": [], "fingerprint": [], "all": [], "bare": []}
    walls: dict[str, list[float]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="lrcheck-record-bench-") as tmp:
        loop(5)  # warm-up
        for n in range(runs):
            order = modes if n % 2 == 0 else modes[::-1]
            got = {mode: timed(mode, updates, Path(tmp), inside[mode]) for mode in order}
            for mode in modes:
                walls[mode].append(got[mode])
            for mode in ratios:
                ratios[mode].append(got[mode] / got["bare"] - 1)
    call_us, loss_us = counted_call_us(), losses_us()
    per_update_us = statistics.median(walls["bare"]) / updates * 1e6
    print(json.dumps({"updates": updates, "every": DEFAULT_EVERY,
                      "counted_call_us": call_us,
                      "counted_overhead": 2 * call_us / per_update_us,
                      "losses_us": loss_us, "losses_overhead": loss_us / per_update_us,
                      **{f"{m}_s": statistics.median(walls[m]) for m in modes},
                      **{f"{m}_ab": statistics.median(r) for m, r in ratios.items()},
                      **{f"{m}_overhead": statistics.median(inside[m]) for m in ratios}}))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5,
         int(sys.argv[2]) if len(sys.argv) > 2 else 100)
