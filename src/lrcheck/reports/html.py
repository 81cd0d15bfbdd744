"""What report.html and the suite's index.html share: the page around the content, escaping,
tables, and the inlined assets.

Every page is one self-contained file: its CSS, scripts and pictures are inline and its
Content-Security-Policy allows no request at all, so it opens offline from a downloaded CI
artifact. Text is escaped unless it is ``Html`` (markup built here from escaped parts), so a
string from the user — a pair's name, a factory path, a file name — shows as text.
"""

from __future__ import annotations

import functools
import html
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from rich.table import Table
from rich.text import Text

ASSETS = Path(__file__).parent / "assets"
# No network at all; inline scripts and styles, pictures as data: URLs.
CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
       "img-src data:")
UPLOT = "uPlot 1.6.32 (MIT)"


class Html(str):
    """Markup, inserted as it is (everything else is escaped)."""


def esc(value: object) -> Html:
    """``value`` as text in a page (``&``, ``<``, ``>``, quotes escaped)."""
    return value if isinstance(value, Html) else Html(html.escape(str(value), quote=True))


def tag(name: str, content: object = "", **attributes: object) -> Html:
    """``<name a="v">content</name>``: ``content`` escaped unless ``Html``; an attribute whose
    value is None is left out, ``class_`` is ``class``, ``data_k`` is ``data-k``."""
    attrs = "".join(f' {key.rstrip("_").replace("_", "-")}="{esc(value)}"'
                    for key, value in attributes.items() if value is not None)
    return Html(f"<{name}{attrs}>{esc(content)}</{name}>")


def join(parts: Iterable[object], sep: str = "") -> Html:
    return Html(sep.join(esc(p) for p in parts))


Cell = object  # text, a number, or Html; a (content, class) pair gives the cell a class


def grid(headers: Sequence[Cell], rows: Iterable[Sequence[Cell]], *, caption: str | None = None,
         row_classes: Sequence[str | None] | None = None) -> Html:
    """A table: a header row, then ``rows``."""
    def cell(name: str, value: Cell) -> Html:
        if isinstance(value, tuple):
            return tag(name, value[0], class_=value[1])
        return tag(name, value, class_="num" if isinstance(value, (int, float)) else None)

    head = tag("tr", join(cell("th", h) for h in headers))
    body = [tag("tr", join(cell("td", v) for v in row),
                class_=row_classes[i] if row_classes else None) for i, row in enumerate(rows)]
    return tag("table", join([tag("caption", caption) if caption else "", tag("thead", head),
                              tag("tbody", join(body))]), class_="grid")


def rich_grid(table: Table) -> Html:
    """A Rich table of the report (the one the CLI prints under the checks) as a page's
    table: the same title, headers and cells."""
    def text(value: object) -> str:
        return value.plain if isinstance(value, Text) else str(value)

    columns = [[text(c) for c in column.cells] for column in table.columns]
    rows = list(zip(*columns, strict=True))
    right = [column.justify == "right" for column in table.columns]
    return grid([text(c.header) for c in table.columns],
                [[(v, "num") if r else v for v, r in zip(row, right, strict=True)]
                 for row in rows], caption=text(table.title) if table.title else None)


def status(value: str) -> tuple[str, str]:
    """A status cell: its word, coloured by its class (and readable without colour)."""
    return (value.replace("_", " "), f"status s-{value}")


def json_script(element_id: str, data: object) -> Html:
    """``data`` as JSON in a ``<script type="application/json">``, safe whatever its strings
    hold (``<`` ``>`` ``&`` as \\u escapes, so no ``</script>`` can end it)."""
    text = (json.dumps(data, allow_nan=False, separators=(",", ":"))
            .replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))
    return Html(f'<script type="application/json" id="{esc(element_id)}">{text}</script>')


@functools.cache
def asset(name: str) -> str:
    return (ASSETS / name).read_text(encoding="utf-8")


def page(title: str, body: Html, *, scripts: Sequence[Html] = (), footer: str = "",
         wide: bool = False) -> str:
    """A whole page: ``body`` (and ``scripts`` after it) with the CSS inline; ``wide``: as wide
    as the window allows (up to 1600 px), and the first column's names wrap (a suite's matrix
    has 16 columns)."""
    styles = asset("uPlot.min.css") + "\n" + asset("report.css") if scripts else asset(
        "report.css")
    opening = '<body class="wide">' if wide else "<body>"
    return ("<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{esc(CSP)}\">\n"
            "<meta name=\"color-scheme\" content=\"light dark\">\n"
            f"<title>{esc(title)}</title>\n<style>\n{styles}\n</style>\n</head>\n"
            f"{opening}\n"
            f"{body}\n<footer>{esc(footer)}</footer>\n{join(scripts, chr(10))}\n</body>\n</html>\n")


def inline_script(text: str) -> Html:
    """A script inlined as it is; one that could end its own element is refused."""
    if "</script" in text.lower():
        raise ValueError("an inlined script holds '</script'")
    return Html(f"<script>{text}</script>")
