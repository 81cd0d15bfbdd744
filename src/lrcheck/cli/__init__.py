"""The command line: flags → specs → one library call → render. ``app`` holds the commands (a
module each: ``compare``, ``trace``, ``diff``, ``suite``, ``list``); ``ending`` maps what ended
a command to its exit code; ``output`` shows what it did. The CLI imports only the library's
api, spec, errors, registries, reports and schemas (tests/test_imports.py)."""

from lrcheck.cli.app import app, main

__all__ = ["app", "main"]
