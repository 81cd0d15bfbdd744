"""The files of a report and of a suite, each written atomically (a reader never sees half a
file).

A report's result.json lists the files the report wrote (``"files"``, beside schema 1's keys):
a later report in the same folder removes those of them it does not write again, and nothing
else, so a file of the user's that has a report file's name (``metrics.png``) is never lost.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from lrcheck.errors import Recorded, SpecError
from lrcheck.reports.atomic import atomic_path, new_file_beside
from lrcheck.result import Report

if TYPE_CHECKING:
    from lrcheck.reports.plots import Plot
    from lrcheck.reports.render import Renderer
    from lrcheck.suite.outcome import SuiteResult


def prepare_file(path: Path, flag: str) -> Path:
    """``path`` as a file written at the end of a command, checked before anything runs: not a
    folder, in a folder that exists or can be made, where a file can be created. Anything else is
    bad input naming ``flag``."""
    if path.is_dir():
        raise SpecError(f"{flag} {str(path)!r} is a folder; give a file name, such as "
                        f"{str(path / 'baseline.json')!r}")
    above = next(p for p in path.parents if p.exists())
    if not above.is_dir():
        raise SpecError(f"{flag} {str(path)!r}: {str(above)!r} is a file, not a folder")
    try:
        os.unlink(new_file_beside(path))
    except OSError as exc:
        raise SpecError(f"{flag} {str(path)!r} cannot be written ({exc.strerror or exc}); "
                        "give another path") from None
    return path


def write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def to_json(data: object) -> str:
    """Strict JSON: a non-finite float (a run that diverged) is written as null.

    ``data`` is a tree of plain values (``to_dict()``s), so the encoder skips its check for
    circular references, and non-finite floats are replaced only once it has met one (the
    usual run has none): about a fifth less time for a result.json."""
    try:
        text = json.dumps(data, indent=2, allow_nan=False, check_circular=False)
    except ValueError:  # a NaN or an infinity
        text = json.dumps(_finite(data), indent=2, allow_nan=False, check_circular=False)
    return text + "\n"


def _finite(value: object) -> object:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


# result.json's key that lists the files of its report.
FILES_KEY = "files"


def result_json(report: Recorded, plots: str = "all") -> str:
    """``report``'s result.json, with the files the report writes (``FILES_KEY``) when its
    PNGs are drawn under ``plots`` (``kinds.PLOT_CHOICES``)."""
    return to_json({**report.to_dict(), FILES_KEY: sorted(report_files(report, plots))})


def report_files(report: Recorded, plots: str = "all") -> set[str]:
    """The files ``report`` writes in its folder, its PNGs drawn under ``plots``: result.json
    alone for an interrupted one."""
    if not isinstance(report, Report):
        return {"result.json"}
    from lrcheck.reports.kinds import drawn_plots

    return {"result.json", "report.md", "report.html", *drawn_plots(report, plots)}


def out_folder(text: str | Path) -> Path:
    """The report folder a user named (``--out``). An empty name is bad input: as a path it
    would be the working directory, filled with report files."""
    if not str(text).strip():
        raise SpecError(f"--out {str(text)!r} names no folder; give one, such as "
                        "--out lrcheck-reports/run1")
    return Path(text)


def prepare_out(out: str | Path) -> Path:
    """``out`` as a folder to write into; an empty name, an existing file there, or a folder
    that cannot be made, is bad input."""
    out = out_folder(out)
    if out.exists() and not out.is_dir():
        raise SpecError(f"--out {str(out)!r} is an existing file; give a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(f"--out {str(out)!r}: cannot create the folder "
                        f"({exc.strerror or exc}); give another") from None
    return out


@contextlib.contextmanager
def report_folder(out: str | Path) -> Iterator[Path]:
    """``prepare_out(out)`` for a command that writes its report at the end: the folders made
    here (``out`` and any missing above it) are removed again, as long as they are empty, when
    the block ends in an exception, such as bad input found once the data is loaded, or a
    crash. A folder that a report was written into, even an incomplete one, stays."""
    out = out_folder(out)
    made = [folder for folder in (out, *out.parents) if not folder.exists()]  # deepest first
    folder = prepare_out(out)
    try:
        yield folder
    except BaseException:
        for path in made:
            try:
                path.rmdir()
            except OSError:  # something was written there (or the folder is gone)
                break
        raise


def markdown_cell(text: str) -> str:
    """``text`` inside a Markdown table cell: its pipes escaped (``\\|ΔLR\\|``), on one line."""
    return text.replace("|", "\\|").replace("\n", " ")


def report_markdown(report: Report, plots: str = "all") -> str:
    """report.md, showing the PNGs drawn under ``plots`` (``kinds.PLOT_CHOICES``)."""
    from lrcheck.reports.kinds import drawn_plots, kind_of, left_out
    from lrcheck.reports.logs import logs_markdown

    kind = kind_of(report)
    lines = [f"# lrcheck: {kind.heading(report)}", "", f"**Verdict: {report.verdict.upper()}**", "",
             *kind.settings(report, kind.subject(report)), "",
             "| check | status | max abs diff | first divergence | detail |",
             "| --- | --- | --- | --- | --- |"]
    for c in report.checks:
        diff = "—" if c.max_abs_diff is None else f"{c.max_abs_diff:.3g}"
        first = "—" if c.first_divergence is None else str(c.first_divergence)
        lines.append(f"| {c.name} | {c.status} | {diff} | {first} | {markdown_cell(c.detail)} |")
    lines += kind.markdown(report)
    lines += logs_markdown(report, markdown_cell)
    drawn = drawn_plots(report, plots)
    for name in drawn:
        lines += ["", f"![{name.removesuffix('.png')}]({name})"]
    if not drawn and kind.plots:
        lines += ["", "_No PNGs drawn (`lrcheck suite --plots`): the plots are in report.html, "
                      "drawn from the data in the page._"]
    for why in left_out(report).values():
        lines += ["", f"_{why}_"]
    return "\n".join(lines + [""])


class Drawer(Protocol):
    """What draws a report's plots and page: a ``Renderer``, or ``DeferredFiles``, which keeps
    them for another process's renderer."""

    def draw(self, plots: Iterable[Plot]) -> None: ...


def write_report(report: Report, out: Path, renderer: Drawer | None = None,
                 plots: str = "all") -> Path:
    """result.json, report.md, the plots (lr.png, loss.png and metrics.png; a trace has only
    lr.png, a diff no metrics.png; none under ``plots`` ``failed`` for a pass, or ``none``:
    ``kinds.drawn_plots``) and report.html, which inlines them, in ``out``. With ``renderer``,
    the plots and the page are sent to it (``renderer.finish()`` waits for them); without,
    drawn here. A page with no PNG to inline is written here at once (milliseconds): no plot
    helper waits for it."""
    from lrcheck.reports.html_report import report_page
    from lrcheck.reports.kinds import report_plots
    from lrcheck.reports.render import Renderer

    out = prepare_out(out)
    pictures = report_plots(report, out, plots)
    _remove_stale(out, keep=report_files(report, plots))
    write_text(out / "result.json", result_json(report, plots))
    write_text(out / "report.md", report_markdown(report, plots))
    html = report_page(report, out / "report.html", [plot.path for plot in pictures])
    if not pictures:
        html.draw()
        return out
    (renderer or Renderer()).draw([*pictures, html])  # in this order: the page inlines the PNGs
    return out


def write_incomplete(result: Recorded, out: Path) -> Path:
    """result.json of an interrupted comparison (verdict ``incomplete``) in ``out``; no plots or
    report.md, which need both runs."""
    out = prepare_out(out)
    _remove_stale(out, keep=report_files(result))
    write_text(out / "result.json", result_json(result))
    return out / "result.json"


@dataclass(frozen=True)
class ReportFiles:
    """A suite's pair reports, each written as its pair ends (``suite.run.PairFiles``), its
    plots drawn by ``renderer`` when given, those that ``plots`` chooses
    (``kinds.PLOT_CHOICES``)."""

    renderer: Renderer | None = None
    plots: str = "all"

    def report(self, report: Report, out: Path) -> tuple[str, ...]:
        """Write ``report`` into ``out``; the names of the PNGs it draws there."""
        write_report(report, out, self.renderer, self.plots)
        return _drawn(report, self.plots)

    def incomplete(self, result: Recorded, out: Path) -> Path:
        return write_incomplete(result, out)


@dataclass
class DeferredFiles:
    """A suite worker's pair reports (``suite.parallel``): written as ``ReportFiles`` writes
    them, except that their plots and page are kept (``drain``) and sent to the suite process,
    whose plot helper draws them, rather than drawn in the worker with a matplotlib of its own."""

    pending: list[Plot] = field(default_factory=list)
    plots: str = "all"

    def draw(self, plots: Iterable[Plot]) -> None:
        self.pending.extend(plots)

    def report(self, report: Report, out: Path) -> tuple[str, ...]:
        write_report(report, out, self, self.plots)
        return _drawn(report, self.plots)

    def incomplete(self, result: Recorded, out: Path) -> Path:
        return write_incomplete(result, out)

    def drain(self) -> list[Plot]:
        """The plots and pages kept since the last call, in the order they are to be drawn."""
        taken, self.pending = self.pending, []
        return taken


def _drawn(report: Report, plots: str) -> tuple[str, ...]:
    """The names of the PNGs ``write_report`` draws for ``report`` under ``plots``."""
    from lrcheck.reports.kinds import drawn_plots

    return tuple(drawn_plots(report, plots))


def _remove_stale(out: Path, keep: set[str]) -> None:
    """Remove from ``out`` the files that the earlier report there wrote (``_written_before``)
    and this one will not write again: left there, they would pass for this one's. Every other
    file is left alone, whatever its name."""
    for name in sorted(_written_before(out) - keep):
        try:
            (out / name).unlink(missing_ok=True)
        except OSError as exc:
            raise SpecError(f"cannot remove {str(out / name)!r}, left from an earlier report: "
                            f"{exc.strerror or exc}") from None


def _written_before(out: Path) -> set[str]:
    """The files that the report in ``out`` says it wrote (its result.json's ``FILES_KEY``),
    among the names a report's files have: none where there is no result.json of lrcheck's,
    or one from before the list was kept."""
    from lrcheck.reports.kinds import plot_names

    try:
        data = json.loads((out / "result.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):  # none, unreadable, or not JSON (UnicodeDecodeError too)
        return set()
    listed = data.get(FILES_KEY) if isinstance(data, dict) else None
    if not isinstance(listed, list):
        return set()
    names = {"result.json", "report.md", "report.html", *plot_names()}
    return names & {name for name in listed if isinstance(name, str)}
def write_json(path: Path, data: object) -> None:
    write_text(path, to_json(data))


def append_text(path: Path, text: str) -> None:
    """Append ``text`` to ``path`` (``$GITHUB_STEP_SUMMARY``), which others write too."""
    try:
        with open(path, "a", encoding="utf-8") as file:
            file.write(text)
    except OSError as exc:
        raise SpecError(f"cannot append to {str(path)!r}: {exc.strerror or exc}") from None


def copy_folder(source: Path, target: Path) -> None:
    """A pair's report folder of a shard copied into the merged suite's folder (nothing to do
    when they are the same folder)."""
    import shutil

    if target.exists() and source.resolve() == target.resolve():
        return
    try:
        shutil.copytree(source, target, dirs_exist_ok=True)
    except (OSError, shutil.Error) as exc:
        raise SpecError(f"cannot copy the report folder {str(source)!r} to {str(target)!r}: "
                        f"{exc}") from None


def write_suite(result: SuiteResult, out: Path, renderer: Renderer | None = None) -> Path:
    """suite.json, summary.md, junit.xml, index.html and matrix.png in ``out``, beside the
    pairs' folders the suite saved as it ran (matrix.png sent to ``renderer`` when given)."""
    from lrcheck.reports.html_suite import suite_page
    from lrcheck.reports.junit import junit_xml
    from lrcheck.reports.matrix import matrix_plot
    from lrcheck.reports.render import Renderer
    from lrcheck.reports.summary import suite_markdown

    out = prepare_out(out)
    write_json(out / "suite.json", result.to_dict())
    write_text(out / "summary.md", suite_markdown(result))
    write_text(out / "junit.xml", junit_xml(result))
    write_text(out / "index.html", suite_page(result))
    (renderer or Renderer()).draw([matrix_plot(result, out / "matrix.png")])
    return out
