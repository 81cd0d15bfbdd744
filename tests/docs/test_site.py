"""The docs site: the generated reference pages hold every command, flag, default and registry
entry (checked against the Typer app and the registries themselves, not against the generator's
own walk), the README's links resolve, and a broken link fails the strict build."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from enum import Enum
from pathlib import Path
from types import ModuleType

import pytest
import typer.main

from lrcheck.cli import app
from lrcheck.experiments.schedulers import SCHEDULERS
from lrcheck.experiments.tasks import TASKS
from lrcheck.plan.frameworks import FRAMEWORKS
from lrcheck.plan.policies import POLICIES
from tests.helpers import HANG_S

ROOT = Path(__file__).parents[2]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_generate", ROOT / "docs/hooks/generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sections(page: str, prefix: str) -> dict[str, str]:
    """``{title: text}`` of the ``## `` sections of a page, their titles without ``prefix``."""
    parts = re.split(r"^## (.+)$", page, flags=re.MULTILINE)
    return {title.strip("`").removeprefix(prefix): text
            for title, text in zip(parts[1::2], parts[2::2], strict=True)}


def _commands() -> dict[str, object]:
    group = typer.main.get_command(app)
    ctx = group.context_class(group, info_name="lrcheck")
    return {name: group.get_command(ctx, name) for name in group.list_commands(ctx)}


def _row(section: str, flag: str) -> str:
    rows = [line for line in section.splitlines()
            if line.startswith("| ") and re.search(rf"`{re.escape(flag)}[` ]", line)]
    assert len(rows) == 1, (flag, rows)
    return rows[0]


def test_the_cli_reference_lists_every_flag_of_every_command_with_its_default():
    sections = _sections(_generator().cli_reference(), "lrcheck ")
    commands = _commands()
    assert set(sections) == set(commands) and {"compare", "trace", "diff", "suite"} <= set(commands)
    checked = 0
    for name, command in commands.items():
        section = sections[name]
        for param in command.params:
            if getattr(param, "hidden", False):
                continue
            if param.param_type_name == "argument":
                assert f"`{param.name}" in section, (name, param.name)
                continue
            for flag in [*param.opts, *param.secondary_opts]:
                row = _row(section, flag)
                checked += 1
            default = param.default
            if isinstance(default, Enum):
                default = default.value
            if default not in (None, "", False, True):
                assert f"`{default}`" in row.split(" | ")[1], (name, param.opts, row)
    assert checked > 50  # compare alone has over 35 options


def test_the_cli_reference_says_the_timeout_covers_multi_process_runs_only():
    row = _row(_sections(_generator().cli_reference(), "lrcheck ")["compare"], "--timeout")
    assert "| `300.0` |" in row
    assert "Multi-process runs only" in row and "A run in this process has no timeout" in row


def test_the_registry_page_lists_every_task_scheduler_policy_and_framework():
    sections = _sections(_generator().registries_reference(), "")
    for title, registry in (("Tasks", TASKS), ("Schedulers", SCHEDULERS),
                            ("Policies", POLICIES), ("Frameworks", FRAMEWORKS)):
        names = re.findall(r"^\| `([^`]+)` \|", sections[title], flags=re.MULTILINE)
        assert names == list(registry), title
        for item in registry.values():
            assert item.description in sections[title], (title, item.name)


def test_every_relative_link_of_the_readme_names_a_file_that_exists():
    readme = (ROOT / "README.md").read_text()
    links = [target.split("#")[0] for target in re.findall(r"\]\(([^)]+)\)", readme)
             if not target.startswith(("http://", "https://", "#"))]
    assert any(link.startswith("docs/") for link in links)
    for link in links:
        assert (ROOT / link).exists(), link


def _build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config),
                           "-d", str(site)], capture_output=True, text=True, timeout=HANG_S,
                          env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin",
                               "PYTHONPATH": str(ROOT / "src")})


@pytest.mark.slow
def test_a_broken_link_or_anchor_fails_the_strict_build(tmp_path):
    pytest.importorskip("mkdocs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", tmp_path / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    built = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert built.returncode == 0, built.stderr
    assert (tmp_path / "site/reference/cli/index.html").exists()
    page = tmp_path / "docs/python.md"
    page.write_text(page.read_text() + "\n[gone](no-such-page.md), [nowhere](checks.md#no-such)\n")
    broken = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert broken.returncode == 1
    assert "'no-such-page.md', but the target is not found" in broken.stderr
    assert "does not contain an anchor '#no-such'" in broken.stderr


def test_the_schema_page_lists_every_key_of_each_file_and_the_site_has_the_schemas():
    from lrcheck import schemas

    sections = _sections(_generator().schemas_reference(), "")
    for name in schemas.NAMES:
        schema = schemas.load(name)
        top = sections[schemas.FILES[name]].split("\n### ")[0]  # before its definitions'
        rows = re.findall(r"^\| `([^`]+)` \| (yes|no) \|", top, flags=re.MULTILINE)
        required = set(schema["required"])
        assert rows == [(key, "yes" if key in required else "no")
                        for key in schema["properties"]], name
        assert f"](../schemas/{schemas.file_name(name)})" in sections[schemas.FILES[name]]
    uris = dict(_generator_files())
    for name in schemas.NAMES:
        assert json.loads(uris[f"schemas/{schemas.file_name(name)}"]) == schemas.load(name)


def _generator_files() -> list[tuple[str, str]]:
    """What the hook adds to the site, as (uri, content), with mkdocs' File stood in for."""
    import mkdocs.structure.files

    added: list[tuple[str, str]] = []

    class Files(list):
        def append(self, file):
            added.append((file.src_uri, file.content_string))

    original = mkdocs.structure.files.File.generated
    try:
        mkdocs.structure.files.File.generated = staticmethod(
            lambda config, uri, content: type("F", (), {"src_uri": uri,
                                                         "content_string": content})())
        _generator().on_files(Files(), None)
    finally:
        mkdocs.structure.files.File.generated = original
    return added
