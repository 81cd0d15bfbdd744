"""Put first on ``PYTHONPATH`` by ``lrcheck record``, so that Python runs it at the start of
every process the recorded command starts (as coverage.py measures subprocesses). With
``PYTHON_LRCHECK_RECORD_DIR`` set it switches lrcheck's recording on (``lrcheck.record.startup``);
it is silent when that is unset. The settings are ``PYTHON*`` variables because DeepSpeed's
multi-node runner passes on no others. Then it runs the user's own ``sitecustomize``, the next
one on ``sys.path``, as Python would have without this one. Nothing here may break the user's
program: a failure is one warning line on stderr.

Under an interpreter where lrcheck is not installed (another environment's Python), lrcheck is
imported from its own library folder (``PYTHON_LRCHECK_RECORD_LIB``), put on ``sys.path`` for
that import only: the user's ``sys.path`` is left as it was, so nothing else the user imports
comes from lrcheck's environment. lrcheck's later imports (``lrcheck.record.process``, at
torch's import) are found through the imported package itself, not ``sys.path``."""

import os
import sys


def _start() -> None:
    if not os.environ.get("PYTHON_LRCHECK_RECORD_DIR"):
        return
    try:
        try:
            from lrcheck.record import startup
        except ImportError:  # lrcheck is not importable from the command's interpreter's path
            lib = os.environ.get("PYTHON_LRCHECK_RECORD_LIB", "")
            sys.path.append(lib)
            try:
                from lrcheck.record import startup
            finally:
                if sys.path and sys.path[-1] == lib:
                    sys.path.pop()
        startup.install()
    except Exception as exc:  # noqa: BLE001 - the user's program must run whatever happens
        print(f"lrcheck: warning: recording is off in process {os.getpid()}: {exc!r}",
              file=sys.stderr)


def _chain() -> None:
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_start()
_chain()
