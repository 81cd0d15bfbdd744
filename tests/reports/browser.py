"""Headless Chromium (Debian's ``chromium``, installed by ``make venv``: scripts/browser.sh)
driven by Playwright through the DevTools protocol, for the tests of report.html and index.html
and for docs/img's screenshots.

``open_page`` loads a file and records what a reviewer would not want: console errors and
warnings, uncaught exceptions, dialogs (an ``alert`` that escaped its escaping) and any request
other than the page itself."""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def chromium() -> str | None:
    """The browser: ``$LRCHECK_CHROMIUM``, else the first of ``CANDIDATES`` on PATH."""
    return os.environ.get("LRCHECK_CHROMIUM") or next(
        (path for name in CANDIDATES if (path := shutil.which(name))), None)


def missing() -> str | None:
    """Why no browser test can run here, or None."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed (pip install -e '.[dev]')"
    if chromium() is None:
        return ("no Chromium on PATH (scripts/browser.sh installs Debian's chromium; "
                "or set LRCHECK_CHROMIUM)")
    return None


@dataclass
class Visit:
    page: Any
    problems: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


@contextmanager
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # --no-sandbox: the tests run as root in CI, where Chromium's sandbox refuses to start.
        instance = playwright.chromium.launch(executable_path=chromium(),
                                              args=["--no-sandbox"])
        try:
            yield instance
        finally:
            instance.close()


@contextmanager
def open_page(instance: Any, path: Path, *, scheme: str = "light", javascript: bool = True,
              width: int = 1100, height: int = 900) -> Iterator[Visit]:
    """``path`` opened in a new context; the page is ready (its plots drawn) when this
    yields."""
    context = instance.new_context(viewport={"width": width, "height": height},
                                   color_scheme=scheme, java_script_enabled=javascript)
    page = context.new_page()
    visit = Visit(page)
    url = path.resolve().as_uri()
    page.on("console", lambda m: m.type in ("error", "warning")
            and visit.problems.append(f"console {m.type}: {m.text}"))
    page.on("pageerror", lambda e: visit.problems.append(f"uncaught: {e}"))
    page.on("dialog", lambda d: (visit.problems.append(f"dialog: {d.message}"), d.dismiss()))
    page.on("request", lambda r: r.url.split("#")[0] != url and visit.requests.append(r.url))
    try:
        page.goto(url)
        if javascript and page.locator("#lrcheck-data").count():
            # A selector, not wait_for_function: the page's CSP forbids the eval that needs.
            page.locator("html[data-plots]").wait_for(state="attached", timeout=30_000)
            assert page.evaluate("document.documentElement.dataset.plots") == "ready"
        yield visit
    finally:
        context.close()


def pixel_spread(png: bytes) -> tuple[float, int]:
    """The standard deviation of a screenshot's pixels and its number of distinct colours: a
    blank or single-colour area has (0, 1)."""
    import numpy as np
    from PIL import Image

    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).reshape(-1, 3)
    return float(pixels.std()), len(np.unique(pixels, axis=0))
