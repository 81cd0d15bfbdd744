"""Every ``result.json``, ``suite.json`` and ``run.json`` the tests write, validated against the
schema lrcheck ships for it (``lrcheck.schemas``): tests/conftest.py checks each test's
``tmp_path`` after the test, and at the end of the session whatever else is under pytest's
temporary folder (``tmp_path_factory.mktemp`` of a shared fixture). A test that writes such a
file broken on purpose (to see it refused) says so with ``@pytest.mark.invalid_files``."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator
from pathlib import Path

import jsonschema
from jsonschema.exceptions import ValidationError

from lrcheck.schemas import FILES, load

# The schema of each file name.
SCHEMA_OF = {file: name for name, file in FILES.items()}
MARKER = "invalid_files"


@functools.cache
def validator(name: str) -> jsonschema.Draft202012Validator:
    schema = load(name)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def problems(path: Path) -> list[str]:
    """What is wrong with ``path`` against its schema (``[]``: valid), each naming the place
    in the document; at most 5."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return [f"not JSON: {exc}"]
    return [f"at {e}" for e in errors(SCHEMA_OF[path.name], data)[:10]]


def errors(name: str, data: object) -> list[str]:
    """Where ``data`` breaks schema ``name``, each as ``$.place: message``; of a value that
    matches none of a choice's branches (a spec or a path), the errors of each branch."""
    def leaves(error: ValidationError) -> Iterator[ValidationError]:
        if not error.context:
            yield error
        for inner in error.context or ():
            yield from leaves(inner)

    found = [leaf for e in validator(name).iter_errors(data) for leaf in leaves(e)]
    return [f"{e.json_path}: {e.message[:200]}"
            for e in sorted(found, key=lambda e: list(map(str, e.absolute_path)))]


def run_json(**about: object) -> dict[str, object]:
    """A record folder's run.json as ``lrcheck record`` writes it, of a command that made no
    update, with ``about`` in place of its keys (a test's own folder)."""
    return {"kind": "lrcheck-record", "schema_version": 1, "command": ["python", "train.py"],
            "exit_code": 0, "ended": "exit code 0", "interrupted": False, "seconds": 1.0,
            "samples_per_update": None, "fingerprint_every": 50, "world_size": 1,
            "updates": {}, "torch_processes": 1, "processes": [],
            "versions": {"python": "3.11.7", "lrcheck": "0.1.0", "torch": "2.13.0"}, **about}


def process_json(**about: object) -> dict[str, object]:
    """One process of run.json's ``processes`` (its ``rankR.json``), with ``about`` in place of
    its keys."""
    return {"pid": 1, "rank": 0, "world": 1, "argv": ["train.py"], "torch": "2.13.0",
            "optimizers": [], "dropout_calls": 0, "lockstep": None, **about}


def optimizer_json(**about: object) -> dict[str, object]:
    """One optimizer of a process's ``optimizers``, with ``about`` in place of its keys."""
    return {"index": 0, "file": "rank0.jsonl", "class": "torch.optim.SGD", "wrapper": None,
            "tensors": 2, "sharded": False, "partitioned": False, "updates": 0,
            "phantom_steps": 0, "dtype": "float32", "stochastic": [], **about}


def files_under(folders: Iterable[Path], skip: Iterable[Path] = ()) -> list[Path]:
    """The files under ``folders`` that have a schema, leaving out those under ``skip``."""
    skipped = [s.resolve() for s in skip]
    return [path for folder in folders if folder.is_dir()
            for path in sorted(folder.rglob("*.json"))
            if path.name in SCHEMA_OF and path.is_file()
            and not any(path.resolve().is_relative_to(s) for s in skipped)]


def report(paths: Iterable[Path]) -> str:
    """One block per invalid file (``""``: all valid)."""
    blocks = []
    for path in paths:
        found = problems(path)
        if found:
            blocks.append(f"{path} does not match lrcheck/schemas/{SCHEMA_OF[path.name]}"
                          f".schema.json:\n  " + "\n  ".join(found))
    return "\n".join(blocks)
