"""The library calls and a suite's pairs default to what the command line defaults to: a user who
moves from ``lrcheck compare`` to ``lrcheck.compare()`` or to a ``[[pair]]`` gets the same run."""

import pytest
import typer

import lrcheck
from lrcheck.cli import app
from lrcheck.errors import SpecError
from lrcheck.spec import CompareOptions, RunSpec, Tolerances
from lrcheck.spec.compare_options import PAIR_FIELDS
from lrcheck.suite.spec import parse_suite

# CLI parameter → library keyword, where the names differ.
LIBRARY_NAME = {"nproc": "world", "ref_nproc": "ref_world"}
# What only the command line has (report files, printing) or spells differently
# (``--inject-overflow`` is a string of update numbers there).
CLI_ONLY = {"out", "json_out", "quiet", "inject_overflow"}


def cli_defaults(name: str) -> dict[str, object]:
    command = typer.main.get_command(app).commands[name]
    return {p.name: p.default for p in command.params
            if p.name not in CLI_ONLY and not p.required}


def library_default(options: CompareOptions, candidate: RunSpec, key: str) -> object:
    """The library's default of the keyword ``key``: a field of ``options``, of its tolerance
    overrides (``tol_lr``) or of ``candidate``."""
    if key.startswith("tol_"):
        return getattr(options.tolerances, key.removeprefix("tol_"))
    return getattr(options, key) if key in PAIR_FIELDS else getattr(candidate, key)


def test_compare_defaults_are_the_command_line_s():
    options = CompareOptions()
    assert options.candidate == RunSpec()
    for name, default in cli_defaults("compare").items():
        key = LIBRARY_NAME.get(name, name)
        if name == "nproc":  # None on the command line: 1, or torchrun's world inside torchrun
            default = 1
        library = library_default(options, options.candidate, key)
        flag = f"--{name.replace('_', '-')}"
        assert library == default, f"{flag}: CLI {default!r}, library {library!r}"


def test_trace_schedule_defaults_are_the_command_line_s(monkeypatch):
    seen = {}

    def simulate_pair(pair, progress=None):
        seen["pair"] = pair
        raise KeyboardInterrupt  # stop here: only the pair it would simulate matters

    monkeypatch.setattr("lrcheck.runner.simulate.simulate_pair", simulate_pair)
    with pytest.raises(KeyboardInterrupt):
        lrcheck.trace_schedule(samples=5000)
    candidate = seen["pair"].candidate
    for name, default in cli_defaults("trace").items():
        key = LIBRARY_NAME.get(name, name)
        library = library_default(CompareOptions(), candidate, key)
        flag = f"--{name.replace('_', '-')}"
        assert library == default, f"{flag}: CLI {default!r}, library {library!r}"
    assert seen["pair"].reference.bs == candidate.effective_batch


def test_trace_schedule_needs_samples_as_the_command_line_does():
    with pytest.raises(SpecError, match="samples="):
        lrcheck.trace_schedule(scheduler="cosine")


def test_a_suite_pair_defaults_are_the_command_line_s():
    (entry,) = parse_suite({"pair": [{}]}, "defaults.toml").entries
    candidate = entry.pair.candidate
    for name, default in cli_defaults("compare").items():
        if name in ("timeout", "ref_bs", "ref_nproc", "ref_framework", "fast") or (
                name.startswith("tol_")):
            continue  # not keys of a pair's run; checked below
        key = LIBRARY_NAME.get(name, name)
        assert getattr(candidate, key) == (1 if name == "nproc" else default), name
    assert entry.pair.reference.bs == candidate.effective_batch and entry.pair.reference.world == 1
    assert entry.pair.reference.framework == candidate.framework == "plain"
    assert entry.pair.noise_floor  # fast = false
    assert entry.pair.tolerances == Tolerances.for_dtype(candidate.dtype)  # no tol_*
