"""lrcheck's modules import downwards only (docs/design.md, "Module map"): every module
belongs to one layer of ``LAYERS`` and imports modules of its own layer or of the layers below,
never above; where ``reports`` imports ``suite``, nothing in ``suite`` imports ``reports``; and
no package, at any depth, imports a module that imports the package back (``runner.ranks``
below ``runner.pair``). Imports inside functions and under ``TYPE_CHECKING`` count (the graph is
read from the source with ``ast``, nothing is imported; no module cycle is
``tests/test_imports.py``'s test). And processes are handled in one layer: only ``runner`` (and
``record``, for a user's own command, and ``procs`` below both) starts, signals or waits for
one."""

from __future__ import annotations

import ast

from tests.test_imports import SRC, _modules, find_cycle, import_graph, parse

PACKAGE = "lrcheck"


def _subpackage(module: str, modules: set[str]) -> str | None:
    """``lrcheck.reports`` for ``lrcheck.reports.files`` and for ``lrcheck.reports`` itself;
    None for a top-level module (``lrcheck.api``) and for ``lrcheck``."""
    parts = module.split(".")
    is_package = module != PACKAGE and any(m.startswith(module + ".") for m in modules)
    return ".".join(parts[:2]) if len(parts) > 2 or is_package else None


def subpackage_graph(graph: dict[str, set[str]]) -> dict[str, dict[str, list[str]]]:
    """For each sub-package, the sub-packages it imports, each with the imports (``a -> b``)
    that make it so."""
    found: dict[str, dict[str, list[str]]] = {}
    modules = set(graph)
    for module, targets in graph.items():
        source = _subpackage(module, modules)
        if source is None:
            continue
        for target in targets:
            dest = _subpackage(target, modules)
            if dest is not None and dest != source:
                found.setdefault(source, {}).setdefault(dest, []).append(f"{module} -> {target}")
    return found


# The layers, bottom to top, each with the top-level modules and sub-packages of ``lrcheck`` it
# holds ("lrcheck": the package's own ``__init__``). docs/design.md's "Module map" shows the same
# table (``test_the_design_page_shows_these_layers``).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("words", ("errors", "words", "version", "hparams", "environment", "recorder")),
    ("arithmetic", ("plan",)),
    ("specifications", ("experiments", "spec")),
    ("data", ("trace", "stepwise", "logs", "procs")),
    ("recording", ("record", "integrations")),
    ("judging", ("checks", "diagnosis", "result")),
    ("training", ("runner",)),
    ("one pair", ("comparison", "command_pair")),
    ("many pairs", ("suite",)),
    ("output", ("reports", "schemas")),
    ("the library's calls", ("api", "suite_api")),
    ("front ends", ("lrcheck", "testing", "pytest_plugin", "cli", "__main__", "ci")),
)


def layer_of(module: str, layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS
             ) -> int | None:
    """The index in ``layers`` of ``module``'s layer (by its top-level name under lrcheck),
    None where no layer holds it."""
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else parts[0]
    return next((i for i, (_, names) in enumerate(layers) if top in names), None)


def upward_imports(graph: dict[str, set[str]],
                   layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS) -> list[str]:
    """Every import in ``graph`` of a module in a layer above the importer's, in words."""
    found = []
    for module, targets in sorted(graph.items()):
        mine = layer_of(module, layers)
        for target in sorted(targets):
            theirs = layer_of(target, layers)
            if mine is not None and theirs is not None and theirs > mine:
                found.append(f"{module} ({layers[mine][0]}) -> {target} ({layers[theirs][0]})")
    return found


def test_every_module_has_a_layer():
    unplaced = sorted(m for m in import_graph() if layer_of(m) is None)
    assert not unplaced, f"modules in no layer of LAYERS (add them): {unplaced}"
    names = [name for _, names in LAYERS for name in names]
    assert len(names) == len(set(names)), "a name in two layers"


def test_no_module_imports_a_layer_above_its_own():
    upward = upward_imports(import_graph())
    assert not upward, "imports upward: " + "; ".join(upward)


def test_the_layer_rule_sees_an_upward_import():
    layers = (("low", ("a",)), ("high", ("b",)))
    graph = {"lrcheck.a.x": {"lrcheck.b"}, "lrcheck.b": {"lrcheck.a.x"}}
    assert upward_imports(graph, layers) == ["lrcheck.a.x (low) -> lrcheck.b (high)"]
    assert layer_of("lrcheck.record.sides") < layer_of("lrcheck.checks.sides")
    assert layer_of("lrcheck.procs.marks") < layer_of("lrcheck.record.launch")
    assert layer_of("lrcheck") == len(LAYERS) - 1


def _layers_on_the_design_page() -> list[tuple[str, tuple[str, ...]]]:
    """docs/design.md's layer table (``| N | layer | `name`, ... | ... |``, in its section
    "The layers"), bottom first."""
    page = (SRC.parent / "docs" / "design.md").read_text(encoding="utf-8")
    section = page.split("\n### The layers\n", 1)[1].split("\n#", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) >= 3 and cells[0].isdigit():
            rows.append((int(cells[0]), cells[1],
                         tuple(n.strip().strip("`").rstrip("/").removesuffix(".py")
                               for n in cells[2].split(","))))
    return [(name, names) for _, name, names in sorted(rows)]


def test_the_design_page_shows_these_layers():
    def ordered(layers):
        return [(name, sorted(names)) for name, names in layers]

    assert ordered(_layers_on_the_design_page()) == ordered(LAYERS)


def _contracted(graph: dict[str, set[str]], package: str) -> dict[str, set[str]]:
    """``graph`` with every module of ``package`` (at any depth) made one node, ``package``."""
    def node(m: str) -> str:
        return package if m == package or m.startswith(package + ".") else m

    out: dict[str, set[str]] = {}
    for module, targets in graph.items():
        out.setdefault(node(module), set()).update(
            node(t) for t in targets if node(t) != node(module))
    for targets in list(out.values()):
        for target in targets:
            out.setdefault(target, set())
    return out


def package_cycles(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """Per package (at any depth) whose modules, taken as one, are on an import cycle: one
    such cycle (a module of it imports one that imports the package back)."""
    packages = sorted({".".join(m.split(".")[:depth]) for m in graph
                       for depth in range(2, len(m.split(".")))})
    return {p: cycle for p in packages
            if (cycle := find_cycle(_contracted(graph, p))) is not None}


def test_no_package_imports_what_imports_it_back():
    found = package_cycles(import_graph())
    assert not found, "packages on an import cycle: " + "; ".join(
        f"{p}: {' -> '.join(c)}" for p, c in found.items())


def test_the_package_rule_sees_a_module_above_the_package_it_imports():
    fake = {"lrcheck.r.local": {"lrcheck.r.ranks.fault"}, "lrcheck.r.ranks.fault": set(),
            "lrcheck.r.ranks.worker": {"lrcheck.r.local"}, "lrcheck.r": set()}
    assert package_cycles(fake) == {"lrcheck.r.ranks": ["lrcheck.r.local", "lrcheck.r.ranks",
                                                        "lrcheck.r.local"]}


def test_no_two_subpackages_import_each_other():
    layers = subpackage_graph(import_graph())
    mutual = [f"{a} <-> {b}: {sorted(layers[a][b])[0]}, {sorted(layers[b][a])[0]}"
              for a in sorted(layers) for b in sorted(layers[a])
              if a < b and a in layers.get(b, {})]
    assert not mutual, "sub-packages that import each other: " + "; ".join(mutual)


def test_no_module_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_layers_see_a_mutual_import_and_the_real_direction():
    fake = {"lrcheck.a.x": {"lrcheck.b.y"}, "lrcheck.b.y": {"lrcheck.a.z"}, "lrcheck.a.z": set()}
    assert subpackage_graph(fake) == {"lrcheck.a": {"lrcheck.b": ["lrcheck.a.x -> lrcheck.b.y"]},
                                      "lrcheck.b": {"lrcheck.a": ["lrcheck.b.y -> lrcheck.a.z"]}}
    layers = subpackage_graph(import_graph())
    assert "lrcheck.suite" in layers["lrcheck.reports"]  # reports shows the suite's outcome
    assert "lrcheck.reports" not in layers.get("lrcheck.suite", {})


# What starts, stops, signals, waits for or leaves a process (docs/design.md, "Module map"): only
# runner/ does, and record/ for a user's own command, and procs/ below both (a process that ends
# itself once lrcheck is gone).
PROCESS_LAYERS = ("lrcheck.runner", "lrcheck.record", "lrcheck.procs")
PROCESS_MODULES = ("subprocess", "multiprocessing", "concurrent.futures.process")
PROCESS_CALLS = {"fork", "forkpty", "kill", "killpg", "wait", "waitpid", "wait3", "wait4",
                 "waitid", "setpgrp", "setsid", "_exit", "system", "popen", "posix_spawn",
                 "posix_spawnp"}


def process_code(source: str) -> list[str]:
    """What in ``source`` handles processes: an import of ``PROCESS_MODULES`` (at any depth), or
    ``os.`` one of ``PROCESS_CALLS`` (also ``spawn*`` and ``exec*``), used or imported."""
    def handles(name: str) -> bool:
        return name in PROCESS_CALLS or name.startswith(("spawn", "exec"))

    found = []
    for node in ast.walk(parse(source)):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names
                      if a.name.startswith(PROCESS_MODULES)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.startswith(PROCESS_MODULES):
                found.append(f"from {node.module} import ...")
            elif node.module == "os":
                found += [f"from os import {a.name}" for a in node.names if handles(a.name)]
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id == "os" and handles(node.attr)):
            found.append(f"os.{node.attr}")
    return found


def test_only_the_runner_and_record_handle_processes():
    outside = {name: found for name, path in _modules().items()
               if not name.startswith(PROCESS_LAYERS)
               and (found := process_code(path.read_text(encoding="utf-8")))}
    assert not outside, f"processes handled outside {PROCESS_LAYERS}: {outside}"


def test_the_process_rule_sees_imports_and_calls_anywhere():
    source = ("import os\nimport multiprocessing.connection\n"
              "def f():\n    from subprocess import Popen\n    os.kill(1, 9)\n"
              "from os import fork, getpid\nos.execv\nos.getpid()\n")
    assert sorted(process_code(source)) == ["from os import fork", "from subprocess import ...",
                                            "import multiprocessing.connection", "os.execv",
                                            "os.kill"]
    runner = process_code((SRC / "lrcheck" / "runner" / "workers.py").read_text())
    assert "import multiprocessing" in runner and "os.kill" in runner
