"""The CUDA path. Skipped, with the reason, where there is no GPU; scripts/gpu-check.sh runs it
on a GPU machine together with the compare table."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="needs CUDA: this machine has no GPU "
                              "(run scripts/gpu-check.sh on one)"),
]


def _synchronisations(bs: int, accum: int) -> tuple[int, int]:
    """Host-device synchronisations while training, as counted by torch's sync debug mode, and
    the number of updates."""
    from lrcheck.experiments.tasks import TASKS
    from lrcheck.runner.plain import train
    from lrcheck.spec import RunSpec

    spec = RunSpec(task="wine", bs=bs, accum=accum, epochs=2, device="cuda")
    data = TASKS["wine"].load(spec.seed, spec.samples)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            trace = train(spec, data, device="cuda")
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = sum("synchroniz" in str(w.message) for w in caught)
    return syncs, len(trace.updates)


def test_recording_adds_no_synchronisation_per_micro_batch():
    one, updates_one = _synchronisations(bs=16, accum=1)
    four, updates_four = _synchronisations(bs=4, accum=4)
    assert updates_one == updates_four
    # Four times the micro-batches, the same synchronisations: they happen per update (the
    # loss read once the update ends) and per epoch (evaluation), never per micro-batch.
    assert four == one, f"accum 1: {one} synchronisations, accum 4: {four}"


def test_cuda_compare_is_exact_in_float64():
    import lrcheck

    report = lrcheck.compare(bs=8, accum=2, task="wine", epochs=2, device="cuda")
    print(report.to_dict()["checks"])
    assert report.environment.device == "cuda"
    assert report.ok
    assert report.check("params").max_rel_diff <= 1e-9
