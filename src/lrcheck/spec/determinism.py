"""``--deterministic``: the settings it applies, declared once (``DETERMINISM``), and what
result.json's ``environment.deterministic`` and a recorded process's ``rank{R}.json`` say of
them (docs/checks.md, "Deterministic runs").

The model is torchtitan's ``set_determinism`` and ``set_batch_invariance``
(``torchtitan/distributed/utils.py``): every setting named, applied before the library it
affects starts, and recorded. Environment variables (``how == "env"``) go into a process's
environment before CUDA, cuBLAS and NCCL start (into the environment of the processes lrcheck
starts, and of this one before it trains); flags (``how == "flag"``) are set once torch is
imported, before the first CUDA operation (``procs.determinism``). An environment variable
the caller set already is kept and reported with lrcheck's value beside it, never replaced.

Pure: imports no torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

# What a setting needs to mean anything: CUDA, NCCL (CUDA and several processes), or a process
# that starts with it (read once, when Python starts).
Needs = Literal["cuda", "nccl", "start"]
NO_CUDA = "not applicable: no CUDA"
ONE_PROCESS = "not applicable: one process, no NCCL"
AT_START = ("not applicable: read when Python starts; set for the processes lrcheck starts "
            "(torchrun's ranks, recorded commands)")


@dataclass(frozen=True)
class Setting:
    """One setting: ``name`` (an environment variable, or the torch attribute or function that
    sets a flag), ``how`` it is applied, its ``value``, what it ``needs`` to apply (None: it
    applies everywhere), what it ``does`` and costs, and ``source``: where torchtitan sets it
    (None: lrcheck's own addition)."""

    name: str
    how: Literal["env", "flag"]
    value: str | bool
    needs: Needs | None
    does: str
    source: str | None = "set_determinism"


_BATCH = "set_batch_invariance"
DETERMINISM: tuple[Setting, ...] = (
    Setting("PYTHONHASHSEED", "env", "0", "start",
            "fixes the hash of strings, so the iteration order of sets and of dicts built from "
            "them is the same in every process; free", "set_determinism (the seed, world 1)"),
    Setting("CUBLAS_WORKSPACE_CONFIG", "env", ":4096:8", "cuda",
            "a fixed cuBLAS workspace (8 buffers of 4 MiB), which deterministic cuBLAS needs; "
            "some 32 MiB of GPU memory per stream"),
    Setting("NCCL_ALGO", "env", "allreduce:tree", "nccl",
            "all-reduce by tree only (the per-collective form, NCCL 2.24 and later), so the "
            "order of the ranks' sum does not change with the message size; the other "
            "collectives keep NCCL's choice", _BATCH),
    Setting("NCCL_PROTO", "env", "Simple", "nccl",
            "the Simple protocol only (LL and LL128 can reorder a reduction); slower for small "
            "messages", _BATCH),
    Setting("NCCL_MIN_NCHANNELS", "env", "1", "nccl",
            "one channel, so a buffer is not split and interleaved differently from run to run; "
            "lower bandwidth", _BATCH),
    Setting("NCCL_MAX_NCHANNELS", "env", "1", "nccl", "as NCCL_MIN_NCHANNELS", _BATCH),
    Setting("NCCL_NVLS_ENABLE", "env", "0", "nccl",
            "no NVLink SHARP (a reduction in the NVSwitch, in its own order)", _BATCH),
    Setting("NCCL_COLLNET_ENABLE", "env", "0", "nccl",
            "no CollNet/SHARP (a reduction in the InfiniBand network)", _BATCH),
    Setting("torch.use_deterministic_algorithms", "flag", True, None,
            "deterministic kernels where torch has them; an operation without one warns "
            "(warn_only=True), and the warning is kept in the report; slower scatter/index "
            "kernels on CUDA"),
    Setting("torch.utils.deterministic.fill_uninitialized_memory", "flag", False, None,
            "torch.empty is not filled with NaN under deterministic algorithms (a fill kernel "
            "per allocation; HF models read some such buffers before writing them)"),
    Setting("torch.backends.cudnn.deterministic", "flag", True, "cuda",
            "deterministic cuDNN convolution algorithms; slower convolutions"),
    Setting("torch.backends.cudnn.benchmark", "flag", False, "cuda",
            "no cuDNN autotuning, which may pick a different algorithm in each run"),
    Setting("torch.backends.cuda.matmul.allow_tf32", "flag", False, "cuda",
            "float32 matrix products in float32, not TF32 (10-bit mantissa); several times "
            "slower on tensor cores", _BATCH),
    Setting("torch.backends.cudnn.allow_tf32", "flag", False, "cuda",
            "float32 convolutions in float32, not TF32", _BATCH),
    Setting("torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction", "flag", False,
            "cuda", "float16 matrix products accumulate in full precision, whatever the tile "
            "split", _BATCH),
    Setting("torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction", "flag", False,
            "cuda", "bfloat16 matrix products accumulate in full precision, whatever the tile "
            "split", _BATCH),
    Setting("torch.set_float32_matmul_precision", "flag", "highest", None,
            "float32 matrix products in float32 on every backend (also the CPU's oneDNN)",
            None),
)
ENV_VARIABLES: dict[str, str] = {s.name: str(s.value) for s in DETERMINISM if s.how == "env"}
FLAGS: tuple[Setting, ...] = tuple(s for s in DETERMINISM if s.how == "flag")


def environment(base: Mapping[str, str]) -> dict[str, str]:
    """``base`` with every environment variable of ``DETERMINISM`` it does not set already (one
    it sets is the caller's, kept: ``described`` says so)."""
    return {**ENV_VARIABLES, **base}


def not_applicable(setting: Setting, device: str, world: int, started: bool) -> str | None:
    """Why ``setting`` does not apply to a process on ``device`` with ``world`` processes
    (``started``: lrcheck started the process with its environment), or None where it does."""
    if setting.needs in ("cuda", "nccl") and device != "cuda":
        return NO_CUDA
    if setting.needs == "nccl" and world == 1:
        return ONE_PROCESS
    if setting.needs == "start" and not started:
        return AT_START
    return None


def described(device: str, world: int, environ: Mapping[str, str], *, started: bool = False,
              read: Callable[[str], object] | None = None) -> dict[str, object]:
    """``{name: value}`` for every setting of ``DETERMINISM``, in its order: the value in
    effect; a string beginning ``not applicable:`` where it does not apply (``not_applicable``);
    for an environment variable set otherwise in ``environ``, or not set, that and lrcheck's
    value; for a flag that ``read(name)`` finds changed (a recorded command's own code set it
    after lrcheck did), its value and lrcheck's. Without ``read``: the flags' own values."""
    entry: dict[str, object] = {}
    for setting in DETERMINISM:
        reason = not_applicable(setting, device, world,
                                started or setting.name in environ)
        if reason is not None:
            entry[setting.name] = reason
            continue
        found: object = (environ.get(setting.name) if setting.how == "env"
                         else setting.value if read is None else read(setting.name))
        lrchecks = f"(--deterministic's: {setting.value!r})"
        entry[setting.name] = (found if found == setting.value
                               else f"not set {lrchecks}" if found is None
                               else f"{found!r}, set by the command or its caller {lrchecks}")
    return entry
