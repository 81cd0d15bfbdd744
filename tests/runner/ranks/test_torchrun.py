"""The torchrun command line and world arithmetic, without launching anything."""

from __future__ import annotations

import numpy as np
import pytest

from lrcheck.errors import SpecError
from lrcheck.plan.order import micro_batches, rank_share
from lrcheck.plan.steps import plan_steps
from lrcheck.runner.ranks.torchrun import (
    WORKER_MODULE,
    TorchrunEnv,
    candidate_world,
    check_ref_world,
    torchrun_argv,
    torchrun_env,
)
from lrcheck.spec import PairSpec, RunSpec


def test_argv_runs_the_worker_module_with_a_standalone_loopback_rendezvous_on_port_0():
    argv = torchrun_argv("/py/bin/python", 3, ["/tmp/run"], run_id="abc")
    assert argv == [
        "/py/bin/python", "-m", "torch.distributed.run",
        "--nnodes", "1", "--nproc-per-node", "3",
        "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0", "--rdzv-id", "abc",
        "--max-restarts", "0", "--monitor-interval", "0.1",
        "-m", WORKER_MODULE, "/tmp/run",
    ]


def test_argv_is_accepted_by_torchruns_own_parser():
    from torch.distributed.run import get_args_parser

    args = get_args_parser().parse_args(torchrun_argv("py", 2, ["/tmp/x"], run_id="r")[3:])
    assert (args.nnodes, args.nproc_per_node, args.rdzv_backend, args.rdzv_endpoint) == (
        "1", "2", "c10d", "127.0.0.1:0")
    assert (args.max_restarts, args.module, args.training_script) == (0, True, WORKER_MODULE)
    assert args.training_script_args == ["/tmp/x"]


@pytest.mark.parametrize("nproc", [0, -1, True, 1.5])
def test_argv_rejects_a_bad_process_count(nproc):
    with pytest.raises(SpecError, match="--nproc"):
        torchrun_argv("py", nproc, [], run_id="r")


def test_no_torchrun_environment_means_none():
    assert torchrun_env({"PATH": "/bin"}) is None


def _node_env(rank: int, local_rank: int, node: int) -> dict[str, str]:
    """What torchrun sets on a rank of a 2 nodes x 8 processes job."""
    return {"TORCHELASTIC_RUN_ID": "job", "RANK": str(rank), "WORLD_SIZE": "16",
            "LOCAL_RANK": str(local_rank), "LOCAL_WORLD_SIZE": "8", "GROUP_RANK": str(node)}


def test_two_nodes_of_eight_second_node():
    env = torchrun_env(_node_env(rank=9, local_rank=1, node=1))
    assert env == TorchrunEnv(rank=9, world=16, local_rank=1, local_world=8, node=1)
    assert env.nodes == 2
    assert env.device("cuda") == "cuda:1"  # one GPU per local rank, not per global rank
    assert env.device("cpu") == "cpu"
    assert candidate_world(None, env) == 16
    assert candidate_world(16, env) == 16


def test_two_nodes_of_eight_pair_and_step_arithmetic():
    """bs 8 x accum 2 on 16 ranks is an effective batch of 256: the default reference and the
    step counts follow, and the 16 ranks' shares cover every global batch exactly once."""
    cand = RunSpec(bs=8, accum=2, world=candidate_world(None, torchrun_env(_node_env(0, 0, 0))))
    assert cand.effective_batch == 256 and cand.label == "bs8x2x16w"
    assert PairSpec.build(cand).reference.bs == 256
    assert PairSpec.build(cand, ref_world=8).reference.bs == 32
    with pytest.raises(SpecError, match="set --ref-bs 256"):
        PairSpec.build(cand, ref_bs=128)

    plan = plan_steps(100_000, 8, 2, 16, 3, "drop")
    assert (plan.updates_per_epoch, plan.total_updates) == (100_000 // 256, 3 * (100_000 // 256))
    assert plan.micro_batches_per_epoch == 2 * (100_000 // 256)  # what len(loader) is on a rank

    batch = np.random.default_rng(0).permutation(1000)[:256]
    shares = [rank_share(m, r, 16) for m in micro_batches(batch, 8, 16) for r in range(16)]
    assert all(len(s) == 8 for s in shares) and len(shares) == 32
    assert sorted(np.concatenate(shares).tolist()) == sorted(batch.tolist())


def test_nproc_inside_torchrun_may_only_repeat_the_world_size():
    env = torchrun_env(_node_env(rank=0, local_rank=0, node=0))
    with pytest.raises(SpecError, match="--nproc 2 inside torchrun, whose world size is 16"):
        candidate_world(2, env)
    assert candidate_world(None, None) == 1
    assert candidate_world(4, None) == 4


def test_reference_world_inside_torchrun_is_1_or_the_whole_world():
    env = torchrun_env(_node_env(rank=3, local_rank=3, node=0))
    check_ref_world(1, env)
    check_ref_world(16, env)
    check_ref_world(3, None)
    with pytest.raises(SpecError, match="--ref-nproc 8 inside torchrun"):
        check_ref_world(8, env)


@pytest.mark.parametrize("environ, match", [
    ({"WORLD_SIZE": "2"}, "RANK is not set"),
    ({"WORLD_SIZE": "two", "RANK": "0"}, "WORLD_SIZE='two'"),
    ({"WORLD_SIZE": "2", "RANK": "2"}, "RANK must lie in"),
    ({"WORLD_SIZE": "6", "RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "4"},
     "same number of processes"),
])
def test_a_broken_torchrun_environment_is_bad_input(environ, match):
    with pytest.raises(SpecError, match=match):
        torchrun_env(environ)


def test_single_node_defaults_from_plain_rank_and_world():
    env = torchrun_env({"WORLD_SIZE": "3", "RANK": "2"})
    assert (env.local_rank, env.local_world, env.node, env.nodes) == (2, 3, 0, 1)


def test_torchrun_s_parser_passes_every_compare_flag_to_lrcheck_but_nproc():
    """torchrun's argparse matches abbreviations of its own options anywhere on the line, even
    after ``-m lrcheck``: ``--nproc`` is read as its ``--nproc-per-node`` (and refused as
    ambiguous), which docs/multiprocess.md says. A new compare flag that collided would fail
    here."""
    pytest.importorskip("torch")
    import typer.main
    from torch.distributed.run import get_args_parser

    from lrcheck.cli import app

    compare = typer.main.get_command(app).commands["compare"]
    flags = [opt for param in compare.params for opt in param.opts if opt.startswith("-")]
    refused = []
    for flag in flags:
        try:
            args = get_args_parser().parse_args(
                ["--nproc-per-node", "2", "-m", "lrcheck", "compare", flag, "1"])
        except SystemExit:
            refused.append(flag)
            continue
        assert args.training_script_args == ["compare", flag, "1"]
    assert refused == ["--nproc"]
