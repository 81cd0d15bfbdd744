"""No lrcheck module imports one that imports it back (docs/design.md, "Module map").

The graph is read from the source, not from ``sys.modules``: every ``import`` and
``from ... import`` of every file under ``src/lrcheck``, at module level and inside functions
alike. An import inside a function keeps a heavy dependency (torch) off the path of
``lrcheck --help``; it must not hide a cycle between lrcheck's own modules.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "lrcheck"


@functools.cache
def parse(source: str) -> ast.Module:
    """``source``'s tree, parsed once per session: the tests of imports, layers and figures
    walk every file of ``src/lrcheck`` several times (none changes a tree it walks)."""
    return ast.parse(source)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted((SRC / PACKAGE).rglob("*.py"))}


def _base(name: str, path: Path, node: ast.ImportFrom) -> str:
    """The module a ``from ... import`` names, with a relative one resolved against ``name``."""
    if node.level == 0:
        return node.module or ""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    parts = package.split(".")
    anchor = ".".join(parts[:len(parts) - (node.level - 1)])
    return f"{anchor}.{node.module}" if node.module else anchor


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The lrcheck modules ``name`` imports anywhere in its file. ``from pkg import x`` names
    ``pkg.x`` when that is a module, else ``pkg`` itself."""
    found: set[str] = set()
    for node in ast.walk(parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _base(name, path, node)
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {target for target in found if target in modules and target != name}


@functools.cache  # read, never changed, by the tests that take it
def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or None when it has none."""
    done: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def visit(node: str) -> list[str] | None:
        path.append(node)
        on_path.add(node)
        for target in sorted(graph[node]):
            if target in on_path:
                return path[path.index(target):] + [target]
            if target not in done:
                cycle = visit(target)
                if cycle is not None:
                    return cycle
        on_path.discard(path.pop())
        done.add(node)
        return None

    for start in sorted(graph):
        if start not in done:
            cycle = visit(start)
            if cycle is not None:
                return cycle
    return None


def test_no_lrcheck_module_imports_one_that_imports_it_back():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_graph_sees_function_level_relative_and_submodule_imports():
    graph = import_graph()
    assert "lrcheck.api" in graph["lrcheck"]  # under TYPE_CHECKING (exported lazily)
    assert "lrcheck.runner.plain" in graph["lrcheck.runner.local"]  # a submodule, by name
    assert "lrcheck.errors" in graph["lrcheck.spec.run"]
    assert "lrcheck.spec.run" in graph["lrcheck.spec"]
    relative = ast.parse("from ..plan import steps").body[0]
    assert isinstance(relative, ast.ImportFrom)
    package = SRC / "lrcheck" / "runner" / "local.py"
    assert _base("lrcheck.runner.local", package, relative) == "lrcheck.plan"
    assert _base("lrcheck.runner", package.with_name("__init__.py"),
                 ast.parse("from . import plain").body[0]) == "lrcheck.runner"
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_plan_imports_neither_spec_nor_runner():
    graph = import_graph()
    for name, targets in graph.items():
        if name.startswith("lrcheck.plan"):
            bad = {t for t in targets
                   if t.split(".")[:2] == ["lrcheck", "spec"] or t.startswith("lrcheck.runner")}
            assert not bad, f"{name} imports {sorted(bad)}"


# What the command line may import of lrcheck (docs/design.md, "Module map"): the library's
# calls and specs, its errors, the registries its choices come from, the report writers and the
# schemas of the files they write; besides itself, and ``lrcheck``, whose public names are the
# api's.
CLI_MAY_IMPORT = ("lrcheck.api", "lrcheck.spec", "lrcheck.errors", "lrcheck.experiments.tasks",
                  "lrcheck.experiments.schedulers", "lrcheck.plan.frameworks",
                  "lrcheck.plan.policies", "lrcheck.reports", "lrcheck.schemas", "lrcheck.cli")


def _cli_imports() -> dict[str, set[str]]:
    """Every lrcheck module each file of ``lrcheck/cli`` names in an ``import`` or ``from``,
    anywhere in it (at module level, inside functions, under TYPE_CHECKING)."""
    found: dict[str, set[str]] = {}
    for path in sorted((SRC / PACKAGE / "cli").rglob("*.py")):
        name = _module_name(path)
        targets: set[str] = set()
        for node in ast.walk(parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                targets.add(_base(name, path, node))
        found[name] = {t for t in targets if t == PACKAGE or t.startswith(PACKAGE + ".")}
    return found


def _allowed(target: str) -> bool:
    return target == PACKAGE or any(target == allowed or target.startswith(allowed + ".")
                                    for allowed in CLI_MAY_IMPORT)


def test_the_cli_imports_only_the_api_spec_errors_registries_and_reports():
    found = _cli_imports()
    assert "lrcheck.cli.compare" in found and "lrcheck.api" in found["lrcheck.cli.compare"]
    bad = {name: sorted(t for t in targets if not _allowed(t))
           for name, targets in found.items()}
    assert not any(bad.values()), f"the CLI imports beyond its layer: {bad}"


def test_the_cli_import_rule_sees_imports_inside_functions_and_under_type_checking():
    assert not _allowed("lrcheck.runner.ranks.torchrun")
    assert not _allowed("lrcheck.suite.run")
    assert not _allowed("lrcheck.specs")  # a prefix of a name is not the module
    assert _allowed("lrcheck.spec.choices") and _allowed("lrcheck.reports.files")
    found = _cli_imports()
    assert "lrcheck.reports.render" in found["lrcheck.cli.output"]  # under TYPE_CHECKING
    assert "lrcheck.reports.files" in found["lrcheck.cli.suite"]  # inside a function
