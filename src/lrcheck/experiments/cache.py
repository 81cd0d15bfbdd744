"""Data sets split and standardised once per machine, not once per process.

Every process lrcheck starts (each rank, each helper) loads its task's data. Through
scikit-learn that costs 1.7 s of CPU a process, mostly the import of scikit-learn, SciPy and
pandas, which a 2-rank ``compare`` pays five times and a test suite hundreds. The arrays
``Task.load`` returns are stored in a ``.npz`` file named by what makes them (the task, the
seed, the samples, scikit-learn's and NumPy's versions, and a digest of ``tasks.py``, so that
a change to how a task is loaded is never served stale) and read back bit for bit.

``LRCHECK_CACHE``: the folder (default ``$XDG_CACHE_HOME/lrcheck``, else ``~/.cache/lrcheck``);
``off`` (or ``0``, ``false``, ``no``, ``none``) keeps nothing, and so does a machine with no
home. A file that cannot be read is loaded again and rewritten; a folder that cannot be written
is only not used. Files are written whole under a temporary name and then renamed, so
processes loading the same set at once never read half a file.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import tempfile
import zipfile
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import numpy as np

from lrcheck.experiments import tasks
from lrcheck.experiments.tasks import TASKS, Dataset

CACHE_ENV = "LRCHECK_CACHE"
OFF = ("off", "0", "false", "no", "none")
_ARRAYS = ("x_train", "y_train", "x_test", "y_test")


@functools.lru_cache(maxsize=8)
def load_data(task: str, seed: int, samples: int | None) -> Dataset:
    """``TASKS[task].load(seed, samples)``, loaded once per process (the check before training,
    the reference, the candidate and a suite's pairs share it; callers do not modify it) and
    once per machine."""
    return cached(task, seed, samples, lambda: TASKS[task].load(seed, samples))


def cache_folder() -> Path | None:
    """Where data sets are kept (absolute: the ranks may start elsewhere), or None when
    ``LRCHECK_CACHE`` is ``off`` (``0``, ``false``, ``no``, ``none``) or no home is known."""
    configured = os.environ.get(CACHE_ENV, "")
    if configured.lower() in OFF:
        return None
    if configured:
        return Path(configured).absolute()
    try:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    except RuntimeError:  # no HOME and no passwd entry: nowhere to keep them
        return None
    return base.absolute() / "lrcheck"


def file_name(task: str, seed: int, samples: int | None) -> str:
    """The file of one data set: a new scikit-learn or NumPy may split or scale differently,
    and so may a new ``tasks.py``."""
    return f"data-{task}-seed{seed}-n{samples}-{_makers()}.npz"


def cached(task: str, seed: int, samples: int | None, load: Callable[[], Dataset]) -> Dataset:
    """The data set from the cache, else ``load()``'s, stored for the next process."""
    folder = cache_folder()
    if folder is None:
        return load()
    path = folder / file_name(task, seed, samples)
    found = _read(path)
    if found is not None:
        return found
    data = load()
    _write(path, data)
    return data


@functools.cache
def _makers() -> str:
    versions = [f"{package}{_version(package)}" for package in ("scikit-learn", "numpy")]
    digest = hashlib.sha256(Path(tasks.__file__).read_bytes()).hexdigest()[:12]
    return "-".join([*versions, digest])


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "none"


def _read(path: Path) -> Dataset | None:
    try:
        with np.load(path, allow_pickle=False) as stored:
            return Dataset(stored["x_train"], stored["y_train"], stored["x_test"],
                           stored["y_test"], num_classes=int(stored["num_classes"]),
                           vocab=int(stored["vocab"]))
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None  # absent, or not whole: loaded again


def _write(path: Path, data: Dataset) -> None:
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".npz")
        try:
            with os.fdopen(handle, "wb") as out:
                np.savez(out, **{name: getattr(data, name) for name in _ARRAYS},
                         num_classes=data.num_classes, vocab=data.vocab)
            os.replace(temporary, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
