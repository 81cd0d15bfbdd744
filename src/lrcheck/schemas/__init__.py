"""JSON Schemas (draft 2020-12) of the files lrcheck writes for other tools to read:
``result.json`` (a report), ``suite.json`` (a suite) and ``run.json`` (a record folder).

They are generated from the code that writes the files (``documents``): the specs' fields from
their dataclasses, the verdicts, modes, statuses and judgings from their enums. The generated
files ship in this package (``lrcheck/schemas/NAME.schema.json``) and sit in the repository's
``schemas/``; ``python -m lrcheck.schemas --write`` writes both, ``--check`` says whether they
are what the code generates (tests/test_schemas.py holds them to it).

Reading one needs nothing but the standard library (``load``; ``lrcheck schema NAME`` prints
it); validating needs a JSON Schema validator, such as the ``jsonschema`` package
(docs/schemas.md).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from lrcheck.schemas.build import Schema
from lrcheck.words import Word


class Document(Word):
    """A file lrcheck writes for other tools, by its schema's name (``lrcheck schema NAME``)."""

    RESULT = "result"
    SUITE = "suite"
    RUN = "run"


NAMES = tuple(d.value for d in Document)
# The file each schema describes, by the schema's name.
FILES = {"result": "result.json", "suite": "suite.json", "run": "run.json"}


def file_name(name: str) -> str:
    """``result.schema.json`` for ``result``."""
    return f"{name}.schema.json"


def load_text(name: str) -> str:
    """The text of the shipped schema ``name`` (one of ``NAMES``)."""
    if name not in NAMES:
        raise ValueError(f"no schema {name!r}; choose one of: {', '.join(NAMES)}")
    return resources.files(__name__).joinpath(file_name(name)).read_text(encoding="utf-8")


def load(name: str) -> Schema:
    """The shipped schema ``name`` (one of ``NAMES``), as a dict."""
    found: Schema = json.loads(load_text(name))
    return found


def generate() -> dict[str, str]:
    """Each schema's file text as the code generates it, by name."""
    from lrcheck.schemas.documents import DOCUMENTS

    return {name: json.dumps(DOCUMENTS[name](), indent=2) + "\n" for name in NAMES}


def places(root: Path) -> list[Path]:
    """Where the schema files go under a source tree ``root``: the repository's ``schemas/``
    and the package's own folder."""
    return [root / "schemas", root / "src" / "lrcheck" / "schemas"]


def stale(root: Path) -> list[Path]:
    """The schema files under ``root`` that are missing or differ from what is generated."""
    texts = generate()
    return [folder / file_name(name) for folder in places(root) for name, text in texts.items()
            if not (folder / file_name(name)).is_file()
            or (folder / file_name(name)).read_text(encoding="utf-8") != text]


def write(root: Path) -> list[Path]:
    """Write the generated schemas under ``root`` (``places``); the files written."""
    written = []
    for folder in places(root):
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in generate().items():
            path = folder / file_name(name)
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written
