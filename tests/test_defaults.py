"""The library calls and a suite's pairs default to what the command line defaults to: a user who
moves from ``lrcheck compare`` to ``lrcheck.compare()`` or to a ``[[pair]]`` gets the same run."""

import inspect

import pytest
import typer

import lrcheck
from lrcheck.api import compare, trace_schedule
from lrcheck.cli import app
from lrcheck.errors import SpecError
from lrcheck.spec import RunSpec
from lrcheck.suite.spec import parse_suite

# CLI parameter → library keyword, where the names differ.
LIBRARY_NAME = {"nproc": "world", "ref_nproc": "ref_world"}
# What only the command line has (report files, printing) or spells differently (tolerances are
# one ``Tolerances`` in the library; ``--inject-overflow`` is a string of update numbers there).
CLI_ONLY = {"out", "json_out", "quiet", "tol_lr", "tol_params", "tol_loss", "tol_metrics",
            "inject_overflow"}


def cli_defaults(name: str) -> dict[str, object]:
    command = typer.main.get_command(app).commands[name]
    return {p.name: p.default for p in command.params
            if p.name not in CLI_ONLY and not p.required}


def library_defaults(function) -> dict[str, object]:
    """The defaults of ``function``'s own keywords (the candidate's fields are a ``RunSpec``'s)."""
    return {name: p.default for name, p in inspect.signature(function).parameters.items()
            if p.default is not inspect.Parameter.empty}


def test_compare_defaults_are_the_command_line_s():
    spec, own = RunSpec(), library_defaults(compare)
    for name, default in cli_defaults("compare").items():
        key = LIBRARY_NAME.get(name, name)
        if name == "nproc":  # None on the command line: 1, or torchrun's world inside torchrun
            default = 1
        library = own[key] if key in own else getattr(spec, key)
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
    candidate, own = seen["pair"].candidate, library_defaults(trace_schedule)
    for name, default in cli_defaults("trace").items():
        key = LIBRARY_NAME.get(name, name)
        library = own[key] if key in own else getattr(candidate, key)
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
        if name in ("timeout", "ref_bs", "ref_nproc", "ref_framework", "fast"):
            continue  # not keys of a pair's run; checked below
        key = LIBRARY_NAME.get(name, name)
        assert getattr(candidate, key) == (1 if name == "nproc" else default), name
    assert entry.pair.reference.bs == candidate.effective_batch and entry.pair.reference.world == 1
    assert entry.pair.reference.framework == candidate.framework == "plain"
    assert entry.pair.noise_floor  # fast = false
