"""``spec.determinism``: the settings of ``--deterministic``, declared once, and what a record
says of them. Pure: no torch."""

import pytest

from lrcheck.errors import SpecError
from lrcheck.spec import PairSpec, RunSpec
from lrcheck.spec.determinism import (
    AT_START,
    DETERMINISM,
    ENV_VARIABLES,
    NO_CUDA,
    ONE_PROCESS,
    described,
    environment,
)


def _by_name():
    return {s.name: s for s in DETERMINISM}


def test_the_table_holds_torchtitans_settings_with_their_values():
    table = _by_name()
    assert len(table) == len(DETERMINISM)  # no name twice
    # torchtitan/distributed/utils.py: set_determinism and set_batch_invariance.
    assert ENV_VARIABLES == {
        "PYTHONHASHSEED": "0", "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
        "NCCL_ALGO": "allreduce:tree", "NCCL_PROTO": "Simple", "NCCL_MIN_NCHANNELS": "1",
        "NCCL_MAX_NCHANNELS": "1", "NCCL_NVLS_ENABLE": "0", "NCCL_COLLNET_ENABLE": "0"}
    flags = {s.name: s.value for s in DETERMINISM if s.how == "flag"}
    assert flags == {
        "torch.use_deterministic_algorithms": True,
        "torch.utils.deterministic.fill_uninitialized_memory": False,
        "torch.backends.cudnn.deterministic": True, "torch.backends.cudnn.benchmark": False,
        "torch.backends.cuda.matmul.allow_tf32": False, "torch.backends.cudnn.allow_tf32": False,
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction": False,
        "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction": False,
        "torch.set_float32_matmul_precision": "highest"}
    # Environment variables first: they must be in place before the libraries start.
    hows = [s.how for s in DETERMINISM]
    assert hows == sorted(hows)
    assert all(s.does for s in DETERMINISM)


def test_on_a_cpu_every_cuda_setting_is_not_applicable_and_the_others_keep_their_value():
    entry = described("cpu", 1, {})
    assert list(entry) == [s.name for s in DETERMINISM]  # stable keys, the table's order
    for setting in DETERMINISM:
        if setting.needs in ("cuda", "nccl"):
            assert entry[setting.name] == NO_CUDA, setting.name
    assert entry["PYTHONHASHSEED"] == AT_START  # read when Python starts: not this process
    assert entry["torch.use_deterministic_algorithms"] is True
    assert entry["torch.set_float32_matmul_precision"] == "highest"


def test_on_cuda_ncclS_settings_need_several_processes():
    one = described("cuda", 1, dict(ENV_VARIABLES))
    assert one["NCCL_ALGO"] == ONE_PROCESS
    assert one["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert one["torch.backends.cuda.matmul.allow_tf32"] is False
    two = described("cuda", 2, dict(ENV_VARIABLES), started=True)
    assert {name: two[name] for name in ENV_VARIABLES} == ENV_VARIABLES


def test_a_callers_own_value_is_kept_and_shown_beside_lrchecks():
    base = {"NCCL_ALGO": "Ring", "PATH": "/bin"}
    env = environment(base)
    assert env["NCCL_ALGO"] == "Ring" and env["PATH"] == "/bin"
    assert env["NCCL_PROTO"] == "Simple"
    entry = described("cuda", 2, env, started=True)
    assert entry["NCCL_ALGO"] == ("'Ring', set by the command or its caller "
                                  "(--deterministic's: 'allreduce:tree')")
    assert entry["NCCL_PROTO"] == "Simple"
    # A process that lost the variables (a launcher that filters its environment) says so.
    assert described("cuda", 2, {}, started=True)["NCCL_PROTO"] == (
        "not set (--deterministic's: 'Simple')")
    # This process started with a hash seed of its own: it applies, and it is not lrcheck's.
    assert described("cpu", 1, {"PYTHONHASHSEED": "7"})["PYTHONHASHSEED"] == (
        "'7', set by the command or its caller (--deterministic's: '0')")


def test_a_flag_read_back_otherwise_is_shown_with_lrchecks_value():
    def read(name):
        return "high" if name == "torch.set_float32_matmul_precision" else dict(
            (s.name, s.value) for s in DETERMINISM)[name]

    entry = described("cpu", 1, {}, read=read)
    assert entry["torch.set_float32_matmul_precision"] == (
        "'high', set by the command or its caller (--deterministic's: 'highest')")
    assert entry["torch.use_deterministic_algorithms"] is True


def test_the_switch_is_a_run_field_both_runs_of_a_pair_share():
    pair = PairSpec.build(RunSpec(deterministic=True))
    assert pair.reference.deterministic and pair.candidate.deterministic
    assert pair.candidate.to_dict()["deterministic"] is True
    assert RunSpec().deterministic is False
    with pytest.raises(SpecError, match="--deterministic is on or off"):
        RunSpec(deterministic="yes")
    with pytest.raises(SpecError, match="share 'deterministic'"):
        PairSpec(pair.reference.replace(deterministic=False), pair.candidate)
