"""Files written atomically: a reader sees the old file or the whole new one, never half of it.
A leaf of ``reports/``: the plots and the report files both write through it."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

from lrcheck.errors import SpecError


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path``, renamed onto it when the block succeeds. It is created
    with the permissions of any new file (the umask's), not mkstemp's owner-only 0600: a report
    is read by others (CI artifacts, a shared folder)."""
    try:
        tmp = new_file_beside(path)
    except OSError as exc:
        raise SpecError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        raise SpecError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def new_file_beside(path: Path) -> Path:
    """A new, empty, hidden file in ``path``'s folder (made when missing)."""
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex[:12]}.tmp"
    path.parent.mkdir(parents=True, exist_ok=True)
    os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    return tmp
