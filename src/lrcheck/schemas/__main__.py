"""``python -m lrcheck.schemas --write``: the schema files regenerated from the code, in the
repository's ``schemas/`` and the package's folder; ``--check``: exit 1 if either is stale;
with neither, print the result schema (``--name suite`` or ``run`` for the others)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lrcheck.schemas import NAMES, generate, stale, write

ROOT = Path(__file__).resolve().parents[3]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lrcheck.schemas", description=__doc__)
    parser.add_argument("--write", action="store_true", help="regenerate the schema files")
    parser.add_argument("--check", action="store_true", help="exit 1 if a file is stale")
    parser.add_argument("--name", choices=NAMES, default="result", help="the schema printed")
    parser.add_argument("--root", type=Path, default=ROOT, help="the source tree")
    args = parser.parse_args(argv)
    if (args.write or args.check) and not (args.root / "pyproject.toml").is_file():
        parser.error(f"--root {str(args.root)!r} is not lrcheck's source tree (no pyproject.toml)")
    if args.write:
        for path in write(args.root):
            print(f"wrote {path}")
        return 0
    if args.check:
        found = stale(args.root)
        for path in found:
            print(f"stale: {path} (python -m lrcheck.schemas --write)", file=sys.stderr)
        return 1 if found else 0
    sys.stdout.write(generate()[args.name])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
