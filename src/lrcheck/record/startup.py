"""What ``boot/sitecustomize.py`` starts in each process of a recorded command: nothing until
the process imports torch (most processes a launcher starts never do, and importing torch for
them would cost seconds), then the global optimizer hooks of ``record.process``."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from lrcheck.record.roles import ENV_DIR

# PYTHON* names: DeepSpeed's multi-node runner passes on no other variables to its nodes.
ENV_SAMPLES = "PYTHON_LRCHECK_RECORD_SAMPLES"
ENV_EVERY = "PYTHON_LRCHECK_RECORD_EVERY"
ENV_LIB = "PYTHON_LRCHECK_RECORD_LIB"
# ``lrcheck record --deterministic``: its flags set at torch's import (spec.determinism).
ENV_DETERMINISTIC = "PYTHON_LRCHECK_RECORD_DETERMINISTIC"

class _TorchWatch(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when ``torch`` is being imported it takes the spec the other
    finders give and runs ``_torch_ready`` once the module has executed. It stays on
    ``sys.meta_path`` until then: a ``find_spec("torch")`` that imports nothing (Transformers
    asks whether torch is there before it imports it) must not use it up."""

    def __init__(self) -> None:
        self.finding = False

    def find_spec(self, name: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if name != "torch" or self.finding:
            return None
        self.finding = True
        try:
            spec: importlib.machinery.ModuleSpec | None = None
            for finder in sys.meta_path:
                find = getattr(finder, "find_spec", None)
                found = find(name, path, target) if find is not None and finder is not self \
                    else None
                if isinstance(found, importlib.machinery.ModuleSpec):
                    spec = found
                    break
        finally:
            self.finding = False
        if spec is None:
            return None
        loader: Any = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        execute = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            execute(module)
            _torch_ready()

        loader.exec_module = exec_module
        return spec


def _torch_ready() -> None:
    """The recording's hooks; first, with ``ENV_DETERMINISTIC``, ``--deterministic``'s flags,
    before the user's code runs a CUDA operation (its environment variables are in the
    command's environment already: ``record.launch.environment``)."""
    deterministic = bool(os.environ.get(ENV_DETERMINISTIC))
    try:
        if deterministic:
            from lrcheck.procs.determinism import apply_flags

            apply_flags()
        from lrcheck.record import interrupt
        from lrcheck.record.process import install_hooks

        interrupt.install(install_hooks(os.environ[ENV_DIR], samples=_number(ENV_SAMPLES),
                                        every=_number(ENV_EVERY) or 0,
                                        deterministic=deterministic))
        from lrcheck.record import precision, roles

        # In a lockstep pair, what the forward computes in until the first update.
        precision.watch(os.environ.get(roles.ENV_ROLE) in (roles.REFERENCE, roles.CANDIDATE))
    except Exception as exc:  # noqa: BLE001 - the user's program must run whatever happens
        print(f"lrcheck: warning: recording is off in process {os.getpid()}: {exc!r}",
              file=sys.stderr)


def _number(name: str) -> int | None:
    value = os.environ.get(name, "")
    return int(value) if value else None


def install() -> None:
    """Watch for torch's import (or install at once where torch is already imported). With
    ``ENV_DETERMINISTIC``, first ``--deterministic``'s environment variables this process
    lacks (but ``PYTHONHASHSEED``, which only a process's start reads), before any library
    starts: a launcher that passes on only ``PYTHON*`` variables (DeepSpeed's multi-node
    runner) still gives every process the switch."""
    from lrcheck.procs.owner import watch

    watch()  # this process ends when lrcheck is gone, however it ended
    if os.environ.get(ENV_DETERMINISTIC):
        from lrcheck.spec.determinism import ENV_VARIABLES

        for name, value in ENV_VARIABLES.items():
            if name != "PYTHONHASHSEED":
                os.environ.setdefault(name, value)
    if "torch" in sys.modules:
        _torch_ready()
    elif not any(isinstance(f, _TorchWatch) for f in sys.meta_path):
        sys.meta_path.insert(0, _TorchWatch())
