"""lrcheck's sub-packages import each other one way only (docs/design.md, "Module map"): where
``reports`` imports ``suite``, nothing in ``suite`` imports ``reports``, counting imports inside
functions and under ``TYPE_CHECKING`` (the graph is read from the source with ``ast``; no module
cycle is ``tests/test_imports.py``'s test)."""

from __future__ import annotations

from tests.test_imports import find_cycle, import_graph

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
