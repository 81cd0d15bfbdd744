"""``--framework lightning``: both runs trained through the real ``lightning.pytorch.Trainer.fit``
(accum 2 x bs 16 against bs 32 in Lightning too), and the ``LrcheckCallback`` users add to their
own Trainer."""

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

pl = pytest.importorskip("lightning.pytorch", reason="the lightning extra is not installed: "
                         "pip install 'lrcheck[lightning]'")

import lrcheck  # noqa: E402
from lrcheck.errors import RunError  # noqa: E402
from lrcheck.integrations.lightning import batch_counts  # noqa: E402
from lrcheck.plan.order import global_batches  # noqa: E402
from lrcheck.plan.windows import window_ids  # noqa: E402
from lrcheck.runner.frameworks.lightning import _same_batch_counts  # noqa: E402
from lrcheck.spec import RunSpec, Tolerances, resolve  # noqa: E402
from tests.fixtures.lightning_user import user_run  # noqa: E402
from tests.helpers import HANG_S  # noqa: E402

EPOCHS = 2
WHOLE = {"task": "synthetic", "samples": 1600}  # 1280 training samples: 40 windows of 32


def summary(report) -> str:
    return "\n".join(f"{c.name}: {c.status} {c.detail}" for c in report.checks)


def through_lightning(**candidate):
    return lrcheck.compare(framework="lightning", epochs=EPOCHS, **candidate)


def shapes(window) -> list[tuple[int, int, float]]:
    return [(m.rank, len(m.ids), m.weight) for m in window]


@pytest.mark.slow
def test_whole_windows_train_exactly_like_bs_32():
    report = through_lightning(accum=2, bs=16, **WHOLE)
    assert report.ok, summary(report)
    assert report.check("params").max_rel_diff <= 1e-9
    assert report.check("lr").max_abs_diff == 0.0
    # configure_optimizers sized the schedule by trainer.estimated_stepping_batches.
    assert report.candidate.context.total_steps == 40 * EPOCHS
    # Lightning divides each micro-batch's mean by accumulate_grad_batches: measured, 1/2 each.
    assert shapes(report.candidate.windows[0]) == [(0, 16, 0.5), (0, 16, 0.5)]
    assert report.environment.frameworks["lightning"] == pl.__version__
    assert report.candidate.warnings == ()  # Lightning's noise filtered, nothing else raised


@pytest.mark.slow
def test_the_last_partial_window_weighs_its_micro_batches_equally():
    """digits: 1437 = 44·32 + 29. Lightning steps on the epoch's last, partial window and weighs
    (mean of 16 + mean of 13) / 2 instead of the mean of 29: the parameters part there."""
    report = through_lightning(accum=2, bs=16)
    assert not report.ok
    params, lr = report.check("params"), report.check("lr")
    assert params.status == "fail" and params.first_divergence == 44, summary(report)
    assert lr.status == "pass", summary(report)
    cand, ref = report.candidate.windows, report.reference.windows
    assert shapes(cand[44]) == [(0, 16, 0.5), (0, 13, 0.5)]
    assert shapes(ref[44]) == [(0, 29, 1.0)]
    assert all(np.array_equal(np.sort(window_ids(a)), np.sort(window_ids(b)))
               for a, b in zip(ref, cand, strict=True))  # the same samples: only their weights


@pytest.mark.slow
def test_a_lone_last_micro_batch_gets_half_the_gradient():
    """1296 training samples = 40·32 + 16: the epoch's last window is one micro-batch of 16,
    still divided by accumulate_grad_batches."""
    report = lrcheck.compare(framework="lightning", epochs=1, accum=2, bs=16, task="synthetic",
                             samples=1620)
    assert shapes(report.candidate.windows[40]) == [(0, 16, 0.5)]
    assert shapes(report.reference.windows[40]) == [(0, 16, 1.0)]
    assert report.check("params").first_divergence == 40, summary(report)


@pytest.mark.slow
def test_two_processes_train_exactly_like_one():
    report = through_lightning(world=2, bs=8, accum=2, **WHOLE)
    assert report.ok, summary(report)
    assert report.check("params").max_rel_diff <= 1e-9
    # DDP averages the ranks: each micro-batch's mean weighs 1/(accum·world).
    assert shapes(report.candidate.windows[0]) == [(0, 8, 0.25), (0, 8, 0.25),
                                                   (1, 8, 0.25), (1, 8, 0.25)]


@pytest.mark.slow
def test_the_distributed_sampler_pads_the_last_round_with_the_epochs_first_sample():
    """1437 samples on 2 ranks: Lightning's DistributedSampler pads rank 1 with the epoch's
    first sample, which the last window trains on a second time."""
    report = through_lightning(world=2, bs=8, accum=2)
    assert report.check("params").first_divergence == 44, summary(report)
    ref, cand = report.reference.windows[44], report.candidate.windows[44]
    extra = np.setdiff1d(window_ids(cand), window_ids(ref))
    assert len(window_ids(cand)) == 30 and len(window_ids(ref)) == 29
    assert extra.tolist() == [window_ids(report.reference.windows[0])[0]]
    assert shapes(cand) == [(0, 8, 0.25), (0, 7, 0.25), (1, 8, 0.25), (1, 7, 0.25)]


def test_own_samplers_that_would_leave_a_rank_waiting_are_refused():
    # 1437 = 359·4 + 1 at bs 2 on 2 ranks: rank 0's loader has one micro-batch more.
    spec = RunSpec(framework="lightning", world=2, bs=2, accum=2, lightning_sampler="own")
    batches = list(global_batches(1437, spec.effective_batch, 1, spec.seed, "flush"))
    with pytest.raises(RunError, match="719, 718 samples, 360, 359 micro-batches"):
        _same_batch_counts(spec.replace(epochs=1), batches)
    _same_batch_counts(spec.replace(epochs=1, bs=8), batches)  # 719 and 718: 90 each


def test_batch_counts():
    labels = torch.tensor([[1, -100], [2, 3]])
    assert [int(v) if isinstance(v, torch.Tensor) else v
            for v in batch_counts({"x": torch.zeros(2, 3), "labels": labels})[:2]] == [3, 2]
    assert batch_counts((torch.zeros(5, 2), torch.zeros(5)))[:2] == (5, 5)


# A user's own Lightning run, recorded with the callback (tests/fixtures/lightning_user.py).

def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def ref_128(tmp_path_factory) -> Path:
    """The bs-32 reference of 128 samples, recorded once for the two candidates diffed
    against it."""
    ref = tmp_path_factory.mktemp("lightning_ref") / "ref.jsonl"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", FutureWarning)
        user_run(ref, 128, 32, 1)
    return ref


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
def test_a_users_run_recorded_at_accum_2_diffs_clean_against_bs_32(tmp_path, ref_128):
    ref, cand = ref_128, tmp_path / "cand.jsonl"
    user_run(cand, 128, 16, 2)
    report = lrcheck.diff(ref, cand, tolerances=Tolerances.for_dtype("float64"))
    assert report.ok, summary(report)
    assert len(lines(cand)) == 8 and all("fingerprint" in r for r in lines(cand))
    fp_ref, fp_cand = (np.array([r["fingerprint"] for r in lines(p)]) for p in (ref, cand))
    assert np.allclose(fp_ref, fp_cand, rtol=1e-12, atol=1e-12)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
def test_a_users_run_with_a_lone_last_micro_batch_fails_where_it_differs(tmp_path):
    """112 = 3·32 + 16: the last window of each epoch is one micro-batch of 16, weighted 1/2."""
    ref, cand = tmp_path / "ref.jsonl", tmp_path / "cand.jsonl"
    user_run(ref, 112, 32, 1)
    user_run(cand, 112, 16, 2, every=3)
    report = lrcheck.diff(ref, cand, tolerances=Tolerances.for_dtype("float64"))
    assert report.check("lr").status == "pass", summary(report)
    # The loss of update 3 is read before its step: the parameters it made show at update 4.
    assert report.check("loss").first_divergence == 4, summary(report)
    recorded = lines(cand)
    assert [k for k, r in enumerate(recorded) if "fingerprint" in r] == [0, 3, 6]
    fp_ref = lines(ref)[3]["fingerprint"]
    assert not np.allclose(fp_ref, recorded[3]["fingerprint"], rtol=1e-9, atol=0)
    assert np.allclose(lines(ref)[0]["fingerprint"], recorded[0]["fingerprint"], rtol=1e-12)


@pytest.mark.slow
def test_a_users_run_on_two_processes_diffs_clean_against_one(tmp_path, ref_128):
    """The callback on every rank of a DDP run, rank 0 writing: 2 × bs 8 × accum 2 against
    bs 32 in one process."""
    ref, cand = ref_128, tmp_path / "cand.jsonl"
    script = Path(__file__).parents[2] / "fixtures" / "lightning_user.py"
    root = str(Path(__file__).parents[3])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(root) / "src"), root]),
           "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                          "--nproc-per-node", "2", str(script), str(cand), "128", "8", "2", "1"],
                         env=env, timeout=HANG_S, capture_output=True, text=True)
    assert run.returncode == 0, f"torchrun exited {run.returncode}:\n{run.stderr[-3000:]}"
    report = lrcheck.diff(ref, cand, tolerances=Tolerances.for_dtype("float64"))
    assert report.ok, summary(report)
    fp_ref, fp_cand = (np.array([r["fingerprint"] for r in lines(p)]) for p in (ref, cand))
    assert fp_cand.shape == fp_ref.shape == (8, 8)
    assert np.allclose(fp_ref, fp_cand, rtol=1e-12, atol=1e-12)


@pytest.mark.slow
def test_ctrl_c_comes_through_lightning():
    """Lightning answers Ctrl-C with sys.exit(1) and SIGINT ignored from then on; the adapter
    lets the KeyboardInterrupt through and restores the handler."""
    import signal

    from lrcheck.experiments.cache import load_data
    from lrcheck.runner.frameworks.lightning import train

    def stop(record, total):
        if record.step == 1:
            raise KeyboardInterrupt

    spec, _ = resolve(RunSpec(framework="lightning", task="synthetic", samples=160, epochs=1))
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        train(spec, load_data("synthetic", spec.seed, 160), device="cpu", on_update=stop)
    assert signal.getsignal(signal.SIGINT) is before
