"""What the command-line tests share: the app through typer's CliRunner, its output printed."""

from typer.testing import CliRunner

from lrcheck.cli import app

runner = CliRunner()
FAST = ["--epochs", "1"]


def invoke(*args: str):
    result = runner.invoke(app, list(args))
    print("exit", result.exit_code, "\nstdout:\n", result.stdout, "\nstderr:\n", result.stderr)
    return result


def one_error_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lrcheck: error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0].removeprefix("lrcheck: error: ")
