"""The app: lrcheck's commands, one module each, and ``main``, the console script.

Torch, scikit-learn and matplotlib are imported only once a command runs, so ``--help`` is fast.
Whatever ends a command — bad input, a crash, Ctrl-C, a signal — becomes one line on stderr and
its exit code (docs/design.md, "Exit codes") in one place, ``ending.exit_code``.
"""

from __future__ import annotations

from typing import Annotated

import typer

from lrcheck.cli.compare import HELP as COMPARE_HELP
from lrcheck.cli.compare import compare_command
from lrcheck.cli.diff import diff_command
from lrcheck.cli.ending import Commands, exit_status, stop_on_signals
from lrcheck.cli.list import list_command
from lrcheck.cli.record import PASS_ON, record_command, run_command
from lrcheck.cli.schema import schema_command
from lrcheck.cli.suite import merge_command, suite_command
from lrcheck.cli.trace import trace_command

app = typer.Typer(cls=Commands, no_args_is_help=True, add_completion=False,
                  rich_markup_mode=None,
                  help="Prove (or disprove) that gradient accumulation and several processes "
                       "train exactly like one process with the same effective batch.")


def _print_version(value: bool) -> None:
    """``--version``: the installed distribution's version, without importing torch."""
    if not value:
        return
    from importlib.metadata import PackageNotFoundError, version

    try:
        number = version("lrcheck")
    except PackageNotFoundError:  # run from a source tree that was not installed
        from lrcheck import __version__ as number
    typer.echo(f"lrcheck {number}")
    raise typer.Exit(0)


@app.callback()
def _options(
    version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                          help="Print lrcheck's version and exit.")] = False,
) -> None:
    pass


app.command("compare", help=COMPARE_HELP)(compare_command)
app.command("trace")(trace_command)
app.command("diff")(diff_command)
app.command("record", context_settings=PASS_ON)(record_command)
app.command("run")(run_command)
app.command("suite")(suite_command)
app.command("suite-merge")(merge_command)
app.command("list")(list_command)
app.command("schema")(schema_command)


def main() -> None:
    """The console script (and ``python -m lrcheck``): run the command, then leave without
    finalising the interpreter (``api.exit_now``): under torchrun that is what keeps a rank from
    aborting in teardown, and everywhere it saves Python's one-second teardown of torch. Every
    report file is written, closed and renamed by then and the plot helper has stopped. A
    command stopped by SIGTERM or SIGHUP exits 128 + its number instead of Ctrl-C's 130. (Tests
    call ``app`` through typer's CliRunner, which this does not touch.)"""
    from lrcheck.api import exit_now, hold, under_torchrun

    hold()  # the garbage collector is held off until a run is built
    arrived = stop_on_signals(under_torchrun())
    try:
        app()
        code: str | int | None = 0
    except SystemExit as exc:
        code = exc.code
    exit_now(exit_status(code, arrived))
