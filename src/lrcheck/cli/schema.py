"""``lrcheck schema NAME``: the JSON Schema of result.json, suite.json or run.json, printed."""

from __future__ import annotations

from typing import Annotated

import typer

from lrcheck.schemas import Document, load_text


def schema_command(
    name: Annotated[Document, typer.Argument(help="Which file's schema: result (result.json), suite (suite.json) or run (a record folder's run.json).", show_default=False)],
) -> None:
    """Print the JSON Schema (draft 2020-12) of a file lrcheck writes, as the package ships it:
    `lrcheck schema result > result.schema.json`, then validate with any JSON Schema validator.
    """
    typer.echo(load_text(name.value), nl=False)
