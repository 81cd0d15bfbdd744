"""lrcheck's sub-packages import each other one way only (docs/design.md, "Module map"): where
``reports`` imports ``suite``, nothing in ``suite`` imports ``reports``, counting imports inside
functions and under ``TYPE_CHECKING`` (the graph is read from the source with ``ast``; no module
cycle is ``tests/test_imports.py``'s test). And processes are handled in one layer: only
``runner`` (and ``record``, for a user's own command) starts, signals or waits for one."""

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
