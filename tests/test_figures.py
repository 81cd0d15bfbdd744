"""The figures a change is held to (issue 30): no file of ``src/lrcheck`` over
``MAX_FILE_LINES`` lines, no function over ``MAX_FUNCTION_LINES`` (from its ``def`` to its last
line), at most ``MAX_ANY_LINES`` lines typed ``Any`` (an annotation that is ``Any`` itself, of a
parameter, a return or a variable: ``dict[str, Any]`` does not count), and, in all its forms
(issue 38), at most ``MAX_ANY_USES`` lines of code that name ``Any`` anywhere, at most
``MAX_DICT_ANY`` of them ``dict[str, Any]`` (190 and 119 when issue 38 was filed, 226 and 153
before these caps). Nothing is left out. ``python -m tests.test_figures`` prints
them."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.test_imports import parse

SRC = Path(__file__).resolve().parents[1] / "src"
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60
MAX_ANY_LINES = 34
MAX_ANY_USES = 171
MAX_DICT_ANY = 101


def _files() -> Iterator[tuple[str, str]]:
    for path in sorted((SRC / "lrcheck").rglob("*.py")):
        yield str(path.relative_to(SRC)), path.read_text(encoding="utf-8")


def long_files() -> dict[str, int]:
    """The files over ``MAX_FILE_LINES`` lines, with their lines."""
    return {name: lines for name, text in _files()
            if (lines := len(text.splitlines())) > MAX_FILE_LINES}


def long_functions(source: str, name: str = "") -> dict[str, int]:
    """The functions of ``source`` (methods and nested ones too) over ``MAX_FUNCTION_LINES``
    lines, as ``name:function``."""
    return {f"{name}:{node.name}": length for node in ast.walk(parse(source))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and (length := (node.end_lineno or node.lineno) - node.lineno + 1)
            > MAX_FUNCTION_LINES}


def any_lines(source: str, name: str = "") -> list[str]:
    """The lines of ``source`` with an annotation that is ``Any`` itself, as ``name:line``."""
    def is_any(node: ast.expr | None) -> bool:
        return (isinstance(node, ast.Name) and node.id == "Any"
                or isinstance(node, ast.Attribute) and node.attr == "Any")

    lines: set[int] = set()
    for node in ast.walk(parse(source)):
        annotations: list[ast.expr | None] = []
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            annotations += [a.annotation for a in (*args.posonlyargs, *args.args,
                                                   *args.kwonlyargs, args.vararg, args.kwarg)
                            if a is not None]
            annotations.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
        lines.update(a.lineno for a in annotations if a is not None and is_any(a))
    return [f"{name}:{line}" for line in sorted(lines)]


def _names_any(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id == "Any"
            or isinstance(node, ast.Attribute) and node.attr == "Any")


def any_uses(source: str, name: str = "") -> tuple[list[str], list[str]]:
    """The lines of ``source`` whose code names ``Any`` in any form (an import is not a use),
    and those of them with a ``dict[str, Any]``, as ``name:line``."""
    uses: set[int] = set()
    dicts: set[int] = set()
    for node in ast.walk(parse(source)):
        if _names_any(node):
            uses.add(getattr(node, "lineno", 0))
        if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
                and node.value.id == "dict" and isinstance(node.slice, ast.Tuple)
                and len(node.slice.elts) == 2 and _names_any(node.slice.elts[1])):
            dicts.add(node.lineno)
    return ([f"{name}:{line}" for line in sorted(uses)],
            [f"{name}:{line}" for line in sorted(dicts)])


def _all_any_uses() -> tuple[list[str], list[str]]:
    found = [any_uses(text, name) for name, text in _files()]
    return [u for uses, _ in found for u in uses], [d for _, dicts in found for d in dicts]


def _all_long_functions() -> dict[str, int]:
    return {key: n for name, text in _files() for key, n in long_functions(text, name).items()}


def _all_any_lines() -> list[str]:
    return [line for name, text in _files() for line in any_lines(text, name)]


def test_no_file_is_over_400_lines():
    assert not long_files(), f"files over {MAX_FILE_LINES} lines: {long_files()}"


def test_no_function_is_over_60_lines():
    found = _all_long_functions()
    assert not found, f"functions over {MAX_FUNCTION_LINES} lines: {found}"


def test_at_most_34_lines_are_typed_any():
    found = _all_any_lines()
    assert len(found) <= MAX_ANY_LINES, f"{len(found)} lines typed Any: {found}"


def test_any_is_named_no_more_than_issue_38_left_it():
    uses, dicts = _all_any_uses()
    assert len(dicts) <= MAX_DICT_ANY, f"{len(dicts)} lines with dict[str, Any]: {dicts}"
    assert len(uses) <= MAX_ANY_USES, f"{len(uses)} lines name Any: {uses}"


def test_the_figures_see_what_they_count():
    source = ("from typing import Any\nimport typing\n"
              "def f(a: Any, *b: Any, c: dict[str, Any], **d: typing.Any) -> Any:\n"
              "    x: Any = 1\n    y: list[Any] = []\n"
              + "".join(f"    z{n} = {n}\n" for n in range(58))
              + "def g() -> dict[str, Any]:\n    class C:\n        def h(self, e: Any):\n"
              + "".join(f"            w{n} = {n}\n" for n in range(59)))
    assert any_lines(source, "m") == ["m:3", "m:4", "m:66"]
    assert long_functions(source, "m") == {"m:f": 61, "m:g": 62}  # h: 60, which is allowed
    assert any_uses(source, "m") == (["m:3", "m:4", "m:5", "m:64", "m:66"], ["m:3", "m:64"])


if __name__ == "__main__":
    print(f"files over {MAX_FILE_LINES} lines: {long_files()}")
    print(f"functions over {MAX_FUNCTION_LINES} lines: {_all_long_functions()}")
    typed = _all_any_lines()
    print(f"lines typed Any: {len(typed)} (at most {MAX_ANY_LINES})")
    named, dicts = _all_any_uses()
    print(f"lines naming Any: {len(named)} (at most {MAX_ANY_USES}), with dict[str, Any]: "
          f"{len(dicts)} (at most {MAX_DICT_ANY})")
    by_folder: dict[str, int] = {}
    for line in typed:
        folder = line.split(":")[0].rsplit("/", 1)[0]
        by_folder[folder] = by_folder.get(folder, 0) + 1
    print("  by folder:", dict(sorted(by_folder.items(), key=lambda kv: -kv[1])))
