"""Make Ludwig importable beside a CPU build of torch, in one virtual environment (``make
venv-ludwig`` runs it after pip): ``python scripts/ludwig_venv_fixup.py .venv-ludwig``.

Why: Ludwig imports torchvision and torchaudio as it imports itself, even for a tabular model
(``ludwig/features/image_feature.py``, ``audio_feature.py``, through its feature registry). The
wheels pip finds for them on this machine are CUDA builds (torchvision 0.28.0+cu130, torchaudio
2.11.1+cu132, the newest torchaudio there is) whose native extensions link against
``libtorch_cuda.so`` and ``libc10_cuda.so``, which a CPU torch does not have: importing either
fails ("operator torchvision::nms does not exist"; "Could not load this library:
.../_torchaudio.so"). No CPU wheels of them can be reached from here (download.pytorch.org
cannot).

Both packages know how to run without their native extension, and lrcheck's Ludwig runs never
call it: torchaudio when its library files are absent (``torchaudio/_extension/utils.py``
``_load_lib`` returns False), torchvision when ``_C`` fails to load (``extension._has_ops()``
False) — except that torchvision 0.28's ``_meta_registrations.py`` registers fake kernels for
``nms`` and ``qnms`` without checking ``_has_ops()``, as it does for every other op. So, for each
of the two whose import fails here, this script moves its native libraries aside (into
``<package>/_lrcheck_disabled/``) and, for torchvision, guards those two registrations the way
the others are guarded. When they import (CPU wheels, or CUDA torch), it changes nothing. It
touches only the environment it is given; nothing in ``src/lrcheck`` depends on it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

GUARD = '''

def _lrcheck_register_fake(name):
    # Added by lrcheck's scripts/ludwig_venv_fixup.py: without _C the op does not exist.
    def wrapper(fn):
        if torchvision.extension._has_ops():
            torch.library.register_fake(name)(fn)
        return fn

    return wrapper
'''


def imports(python: Path, module: str) -> bool:
    done = subprocess.run([str(python), "-c", f"import {module}"], capture_output=True)
    return done.returncode == 0


def site_packages(python: Path) -> Path:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True,
                         check=True).stdout
    return Path(out.strip())


def set_aside(package: Path, libraries: list[Path]) -> None:
    aside = package / "_lrcheck_disabled"
    aside.mkdir(exist_ok=True)
    for library in libraries:
        library.rename(aside / library.name)
        print(f"  moved aside {library.relative_to(package.parent)}")


def fix_torchaudio(site: Path) -> None:
    package = site / "torchaudio"
    set_aside(package, sorted((package / "lib").glob("*.so")))


def fix_torchvision(site: Path) -> None:
    package = site / "torchvision"
    set_aside(package, sorted(package.glob("*.so")))
    meta = package / "_meta_registrations.py"
    text = meta.read_text()
    if "_lrcheck_register_fake" not in text:
        anchor = "\n\n@functools.lru_cache(None)\ndef get_meta_lib"
        if anchor not in text:
            raise SystemExit(f"{meta}: not the torchvision this script knows; fix by hand")
        text = text.replace(anchor, GUARD + anchor, 1)
        text = text.replace('@torch.library.register_fake("torchvision::',
                            '@_lrcheck_register_fake("torchvision::')
        meta.write_text(text)
        print(f"  guarded the fake kernels of {meta.relative_to(site)}")


def main(venv: str) -> int:
    python = Path(venv) / "bin" / "python"
    site = site_packages(python)
    for module, fix in (("torchaudio", fix_torchaudio), ("torchvision", fix_torchvision)):
        if imports(python, module):
            continue
        print(f"{module} does not import beside this torch: running it without its native "
              "extension")
        fix(site)
        if not imports(python, module):
            raise SystemExit(f"{module} still does not import in {venv}")
    if not imports(python, "ludwig.api"):
        raise SystemExit(f"ludwig does not import in {venv}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else ".venv-ludwig"))
