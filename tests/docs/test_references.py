"""Every page the code and the docs cite exists, and so does every section they cite on it.

A citation is a path to a page of the docs site (``docs/``, then a page's name, then ``.md``;
a page the docs hook generates counts) or to a file at the root of the repository (an
upper-case name such as ``BENCHMARKS.md``), optionally followed by ``#anchor`` (the slug of a
heading, as the site makes it) and by one or more section titles in double quotes:
``(docs/design.md, "Module map")``, ``docs/checks.md, "The checks" and "Two examples"``. A
title is a heading of that page, compared without backticks and case, or the heading's
beginning up to its parenthesis, colon or comma ("The verdict" for "The verdict (issue 19):
…"). A comment's citation may run over several lines, each continued by ``#``."""

from __future__ import annotations

import bisect
import functools
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from tests.docs.test_site import _generator

ROOT = Path(__file__).parents[2]

CITATION = re.compile(
    r"(?<![\w/.-])(?P<path>docs/[a-z0-9][a-z0-9_/-]*\.md|[A-Z][A-Z0-9_]*\.md)"
    r"(?:#(?P<anchor>[A-Za-z0-9_-]+))?(?:'s)?"
    r"(?P<titles>,\s*\"[^\"]+\"(?:\s*(?:,|and)\s*\"[^\"]+\")*)?")
QUOTED = re.compile(r"\"([^\"]+)\"")
# What may follow a title that is the beginning of a heading.
TITLE_ENDS = ("(", ":", ",", ";", "—")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


@dataclass(frozen=True)
class Citation:
    path: str
    anchor: str | None
    titles: tuple[str, ...]
    line: int


def _joined(text: str, python: bool) -> tuple[str, list[int]]:
    """``text`` with every line break (and the indentation around it, and in ``python`` the
    ``#`` that continues a comment) made one space, and where each of its lines now starts."""
    starts, out, at = [], [], 0
    for line in text.splitlines():
        piece = line.strip()
        if python and piece.startswith("#"):
            piece = piece.lstrip("#").lstrip()
        starts.append(at)
        out.append(piece)
        at += len(piece) + 1
    return " ".join(out), starts


def citations(text: str, python: bool = True) -> list[Citation]:
    """Every citation in ``text`` (``python``: source, whose comments go on over lines that
    start with ``#``; else Markdown), with the line it begins on (1-based)."""
    joined, starts = _joined(text, python)
    found = []
    for match in CITATION.finditer(joined):
        line = bisect.bisect_right(starts, match.start())
        titles = tuple(" ".join(t.split()) for t in QUOTED.findall(match["titles"] or ""))
        found.append(Citation(match["path"], match["anchor"], titles, line))
    return found


def _plain(title: str) -> str:
    return " ".join(title.replace("`", "").split()).casefold()


def slug(title: str) -> str:
    """A heading's anchor as the site makes it (Python-Markdown's toc ``slugify``)."""
    text = unicodedata.normalize("NFKD", title.replace("`", "")).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def titled(title: str, heading: str) -> bool:
    """Whether ``title`` names ``heading``: the whole of it, or its beginning (``TITLE_ENDS``)."""
    want, have = _plain(title), _plain(heading)
    rest = have.removeprefix(want).lstrip()
    return have.startswith(want) and (not rest or rest.startswith(TITLE_ENDS))


def headings(text: str) -> list[str]:
    """The headings of a Markdown page, outside its fenced code blocks."""
    found, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and (match := HEADING.match(line)):
            found.append(match[1])
    return found


def broken(path: Path, root: Path = ROOT) -> list[str]:
    """What is wrong with each citation of the file ``path``: a page that does not exist under
    ``root``, or an anchor or a section title that no heading of it has."""
    problems = []
    for cite in citations(path.read_text(encoding="utf-8"), path.suffix == ".py"):
        where = f"{path}:{cite.line}: {cite.path}"
        text = page_text(cite.path, root)
        if text is None:
            problems.append(f"{where}: no such file")
            continue
        titles = headings(text)
        if cite.anchor is not None and cite.anchor not in {slug(t) for t in titles}:
            problems.append(f"{where}#{cite.anchor}: no heading has that anchor")
        for title in cite.titles:
            if not any(titled(title, t) for t in titles):
                problems.append(f'{where}, "{title}": no such heading')
    return problems


@functools.cache
def _generated() -> dict[str, str]:
    """The pages the docs hook generates when the site is built, by their path."""
    hook = _generator()
    return {f"docs/{hook.CLI_PAGE}": hook.cli_reference(),
            f"docs/{hook.REGISTRIES_PAGE}": hook.registries_reference()}


def page_text(cited: str, root: Path) -> str | None:
    """The text of the page or file ``cited`` (a path from ``root``), None where there is none."""
    path = root / cited
    if path.is_file():
        return path.read_text(encoding="utf-8")
    return _generated().get(cited)


def _cited_from() -> list[Path]:
    """The files whose citations are checked: the code, the tests, the docs hooks and pages."""
    files = [*sorted((ROOT / "src").rglob("*.py")), *sorted((ROOT / "tests").rglob("*.py")),
             *sorted((ROOT / "docs").rglob("*.py")), *sorted((ROOT / "docs").rglob("*.md")),
             ROOT / "README.md"]
    return [f for f in files if f.is_file()]


def test_every_page_and_section_cited_exists():
    problems = [problem for path in _cited_from() for problem in broken(path)]
    assert problems == []


def test_the_citations_are_found_where_they_are():
    """The scan sees the citations it must check (a pattern that matched nothing would pass)."""
    cited = [c for path in _cited_from()
             for c in citations(path.read_text(encoding="utf-8"), path.suffix == ".py")]
    assert {c.path for c in cited} >= {"docs/design.md", "docs/checks.md", "BENCHMARKS.md"}
    assert any(c.path == "docs/design.md" and c.titles for c in cited)


def test_a_broken_citation_is_told_with_its_file_and_line(tmp_path):
    page, gone, design = "docs/" + "design.md", "docs/" + "gone.md", "DESIGN" + ".md"
    (tmp_path / "docs").mkdir()
    (tmp_path / page).write_text("# Design\n\n## Module map (today)\n\n## Exit codes\n\n"
                                 "```\n## not a heading\n```\n")
    source = tmp_path / "module.py"
    source.write_text(
        f'"""Laid out as {page} says ({page}, "Module map"), {page}#module-map-today."""\n'
        f"# A comment's citation over two lines ({page},\n"
        '# "module   MAP" and "Exit codes").\n'
        f'# Broken: {gone}, {page}#no-such, ({page}, "Not a section"), ({page}, "Exit"),\n'
        f'# ({page}, "Exit codes" and "not a\n# heading"), {design}.\n')
    assert [c.line for c in citations(source.read_text())] == [1, 1, 1, 2, 4, 4, 4, 4, 5, 6]
    assert broken(source, tmp_path) == [
        f"{source}:4: {gone}: no such file",
        f"{source}:4: {page}#no-such: no heading has that anchor",
        f'{source}:4: {page}, "Not a section": no such heading',
        f'{source}:4: {page}, "Exit": no such heading',
        f'{source}:5: {page}, "not a heading": no such heading',
        f"{source}:6: {design}: no such file",
    ]
    generated = tmp_path / "generated.py"  # a page the docs hook makes, and its sections
    cli = "docs/" + "reference/cli.md"
    generated.write_text(f'# {cli}, "lrcheck compare" and "lrcheck nope"\n')
    assert broken(generated) == [f'{generated}:1: {cli}, "lrcheck nope": no such heading']


CONFLICT = re.compile(r"^(<{7} |={7}$|>{7} )", re.MULTILINE)


def test_no_file_holds_a_merge_conflict_s_markers():
    """A merge left half-resolved shows on the site as two versions of a section, and no build
    fails on it: every text file of the docs, the code and the tests is searched."""
    roots = [ROOT / "docs", ROOT / "src", ROOT / "tests", ROOT / "benchmarks"]
    files = [p for root in roots for p in root.rglob("*")
             if p.suffix in (".md", ".py", ".toml", ".yml", ".yaml", ".html", ".css", ".js")]
    files += [p for p in ROOT.glob("*.md")]
    found = [f"{p.relative_to(ROOT)}:{text[:m.start()].count(chr(10)) + 1}"
             for p in files for text in [p.read_text(encoding="utf-8", errors="replace")]
             for m in CONFLICT.finditer(text)]
    assert len(files) > 100 and not found, found
