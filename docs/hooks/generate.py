"""The reference pages of the docs site, generated from the code at build time.

mkdocs runs this file as a hook (``hooks:`` in mkdocs.yml): ``on_files`` adds
``reference/cli.md`` (every command of the Typer app, every option with its default and help),
``reference/registries.md`` (the tasks, schedulers, policies and frameworks, read from the
registries the CLI validates against), ``reference/schemas.md`` (the keys of result.json,
suite.json and run.json, read from their JSON Schemas) and the schemas themselves,
``schemas/NAME.schema.json``, as ``lrcheck.schemas`` generates them. Nothing generated here is
committed, so the pages cannot drift from the code; tests/docs/ checks that every flag, every
registry entry and every key of a schema is on them.

Only stable public entry points are used: ``lrcheck.cli.app`` turned into a click command by
``typer.main.get_command``, the four registries (plain dicts of dataclasses) and
``lrcheck.spec.settings_for`` (the settings that apply to a framework).
"""

from __future__ import annotations

import json
import re
from typing import Any

CLI_PAGE = "reference/cli.md"
REGISTRIES_PAGE = "reference/registries.md"
SCHEMAS_PAGE = "reference/schemas.md"

# What --help adds after an option's help: "[default: 2]", "[required]".
_SUFFIX = re.compile(r"\s*\[(?P<key>default|required)(?::\s*(?P<value>[^\]]*))?\]\s*$")


def _cell(text: object) -> str:
    """One Markdown table cell: a single line, its pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(names: str) -> str:
    """``-q, --quiet`` as ``-q``, ``--quiet`` and ``--x / --no-x`` as ``--x`` / ``--no-x``; a
    metavar stays with its flag."""
    return ", ".join(" / ".join(f"`{n}`" for n in pair.split(" / "))
                     for pair in re.split(r",\s+(?=-)", names.strip()))


def option_row(param: Any, ctx: Any) -> tuple[str, str, str]:
    """(flags, default, help) of one option or argument, as ``--help`` shows them."""
    record = param.get_help_record(ctx)
    names, help_text = record if record else (param.name, "")
    default = ""
    while (found := _SUFFIX.search(help_text)):
        default = (f"`{found['value']}`" if found["key"] == "default" else "required")
        help_text = help_text[: found.start()]
    if not default:
        flag = getattr(param, "is_flag", False)
        default = "off" if flag and not param.default else "—"
    return _code(names), default, help_text


def commands() -> tuple[Any, dict[str, Any]]:
    """The click group of ``lrcheck`` and its commands by name, in the CLI's own order."""
    import typer.main

    from lrcheck.cli import app

    # typer >= 0.20 vendors click (typer._click): use the command's own context class.
    group = typer.main.get_command(app)
    ctx = group.context_class(group, info_name="lrcheck")
    return group, {name: group.get_command(ctx, name) for name in group.list_commands(ctx)}


def visible_options(command: Any) -> list[Any]:
    """The options ``--help`` shows (not hidden), in its order."""
    return [p for p in command.params
            if p.param_type_name == "option" and not getattr(p, "hidden", False)]


def _param_rows(command: Any, ctx: Any) -> list[str]:
    rows = ["| option | default | meaning |", "| --- | --- | --- |"]
    for param in visible_options(command):
        rows.append("| " + " | ".join(_cell(c) for c in option_row(param, ctx)) + " |")
    return rows


def _arguments(command: Any, ctx: Any) -> list[str]:
    args = [p for p in command.params if p.param_type_name == "argument"]
    if not args:
        return []
    rows = ["| argument | meaning |", "| --- | --- |"]
    for arg in args:
        names, default, help_text = option_row(arg, ctx)
        rows.append(f"| {_cell(names)} | {_cell(help_text)} ({default}) |")
    return [*rows, ""]


def _help_paragraphs(text: str) -> str:
    """A docstring as Markdown: typer's ``\\b`` markers dropped, paragraphs kept."""
    text = text.replace("\b\n", "").replace("\b", "")
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text) if p.strip()]
    return "\n\n".join(paragraphs)


def cli_reference() -> str:
    group, by_name = commands()
    top = group.context_class(group, info_name="lrcheck")
    lines = [
        "# Command-line reference",
        "",
        "Generated from the Typer app when the site is built (`docs/hooks/generate.py`): every "
        "command, every option with its default, in the words of `--help`.",
        "",
        "```text",
        group.get_usage(top),
        "```",
        "",
        "| option | meaning |",
        "| --- | --- |",
    ]
    for param in visible_options(group):
        names, _, help_text = option_row(param, top)
        lines.append(f"| {_cell(names)} | {_cell(help_text)} |")
    lines.append("")
    for name, command in by_name.items():
        ctx = command.context_class(command, parent=top, info_name=name)
        lines += [f"## `lrcheck {name}`", "", "```text", command.get_usage(ctx), "```", "",
                  _help_paragraphs(command.help or ""), "", *_arguments(command, ctx)]
        if visible_options(command):
            lines += [*_param_rows(command, ctx), ""]
    return "\n".join(lines)


def _registry(title: str, flag: str, headers: tuple[str, ...],
              rows: list[tuple[Any, ...]]) -> list[str]:
    lines = [f"## {title}", "", f"The values of `{flag}`.", "",
             "| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


def registries_reference() -> str:
    from lrcheck.experiments.schedulers import SCHEDULERS
    from lrcheck.experiments.tasks import TASKS
    from lrcheck.plan.frameworks import FRAMEWORKS
    from lrcheck.plan.policies import POLICIES
    from lrcheck.spec import settings_for

    def get(item: Any, field: str) -> Any:
        return getattr(item, field, "")

    lines = [
        "# Tasks, schedulers, policies and frameworks",
        "",
        "Generated from the registries the CLI validates against (`lrcheck list` prints the "
        "same), when the site is built. What each one means: [What is checked and why]"
        "(../checks.md), [Schedules and policies](../schedules.md), "
        "[Frameworks](../frameworks.md).",
        "",
    ]
    lines += _registry("Tasks", "--task", ("name", "what", "data"),
                       [(f"`{t.name}`", get(t, "description"), get(t, "source"))
                        for t in TASKS.values()])
    lines += _registry("Schedulers", "--scheduler", ("name", "what"),
                       [(f"`{s.name}`", get(s, "description")) for s in SCHEDULERS.values()])
    lines += _registry("Policies", "--policy", ("name", "what", "who does this"),
                       [(f"`{p.name}`", get(p, "description"), get(p, "who"))
                        for p in POLICIES.values()])
    lines += _registry(
        "Frameworks", "--framework", ("name", "what", "extra", "settings that apply"),
        [(f"`{f.name}`", get(f, "description"),
          f"`lrcheck[{f.module}]`" if get(f, "module") else "—",
          ", ".join(f"`{s}`" for s in settings_for(f.name)) or "—")
         for f in FRAMEWORKS.values()])
    return "\n".join(lines)


def _words(schema: dict[str, Any]) -> str:
    """A property's type in a table cell: its words, its constant, its type or its definition."""
    if "enum" in schema:
        return " or ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in schema:
        return " or ".join(_words(s) for s in schema["anyOf"])
    if schema.get("maxProperties") == 0:
        return "`{}`"
    kind = schema.get("type", "any")
    kinds = " or ".join(kind) if isinstance(kind, list) else kind
    if kind == "array":
        return f"array of {_words(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"object of {_words(schema['additionalProperties'])}"
    return kinds


def _keys_table(schema: dict[str, Any]) -> list[str]:
    rows = ["| key | always written | type | meaning |", "| --- | --- | --- | --- |"]
    required = set(schema.get("required", []))
    for key, prop in schema.get("properties", {}).items():
        rows.append(f"| `{key}` | {'yes' if key in required else 'no'} | {_cell(_words(prop))} "
                    f"| {_cell(prop.get('description', ''))} |")
    return rows


def schemas_reference() -> str:
    """The keys of each file lrcheck writes, read from its JSON Schema: the top level's, then
    each definition's."""
    from lrcheck.schemas import FILES, NAMES, file_name
    from lrcheck.schemas.documents import DOCUMENTS

    lines = ["# File schemas", "",
             "Generated from `lrcheck.schemas` when the site is built; how to validate a file "
             "and what may change: [Schemas](../schemas.md).", ""]
    for name in NAMES:
        schema = DOCUMENTS[name]()
        lines += [f"## `{FILES[name]}`", "", schema["description"], "",
                  f"The whole schema: [{file_name(name)}](../schemas/{file_name(name)}).", "",
                  *_keys_table(schema), ""]
        for part, definition in schema["$defs"].items():
            if "properties" in definition:
                lines += [f"### `{FILES[name]}`: {part}", "", *_keys_table(definition), ""]
    return "\n".join(lines)


def on_files(files: Any, config: Any) -> Any:
    """mkdocs hook: add the generated reference pages and the schemas to the site."""
    from mkdocs.structure.files import File

    from lrcheck.schemas import file_name, generate

    for uri, content in ((CLI_PAGE, cli_reference()), (REGISTRIES_PAGE, registries_reference()),
                         (SCHEMAS_PAGE, schemas_reference()),
                         *((f"schemas/{file_name(n)}", text) for n, text in generate().items())):
        files.append(File.generated(config, uri, content=content))
    return files
