"""numba for this package's compiled kernels, loaded without SciPy's BLAS bindings.

Importing this module imports numba and its array-math module (``numba.np.arraymath``), the
part of numba's CPU target that a process loads before it runs its first compiled function,
from the cache or not. That module asks once, at import, whether SciPy's BLAS bindings
(``scipy.linalg.cython_blas``) can be imported; if so, importing them pulls in all of
``scipy.linalg``: about 0.15 s of CPU, a sixth of a small `index` or `scan`, for nothing this
package uses (SciPy is installed because datasketch needs it).

So the bindings are hidden during that one import (a ``None`` entry in ``sys.modules`` makes
their import fail at once) and unhidden right after; SciPy stays importable as before. The
only effect, in the importing process: numba's compiled ``np.correlate``/``np.convolve`` on
floats use a plain loop instead of a BLAS dot product. Everything else (``np.dot``,
``np.linalg``) looks SciPy up when it is compiled, as without this module. None of this
package's kernels calls any of them. In a process that has already loaded numba's target,
nothing changes.

`warm` additionally builds numba's CPU target (its typing and lowering registries, the other
~0.1 s of CPU a process pays at its first compiled call), for a process that exists to run
kernels: the worker pool's forkserver, whose forked workers inherit it.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: numba's own setting of its cache folder (read when numba is imported).
CACHE_ENV = "NUMBA_CACHE_DIR"


def _writable(folder: Path) -> bool:
    """Whether this process can create files in ``folder`` (created if missing)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False


def _own_folder(folder: Path) -> bool:
    """``folder`` exists or is created, private to this user, and writable."""
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        info = folder.lstat()
    except OSError:
        return False
    return info.st_uid == os.getuid() and folder.is_dir() and not folder.is_symlink() \
        and _writable(folder)


def _choose_cache() -> bool:
    """Where numba keeps the compiled kernels, decided before numba is imported; False when
    no folder at all can be written (the kernels are then compiled in each process).

    numba writes next to the sources (``__pycache__``), else in the user's cache folder
    (``$XDG_CACHE_HOME`` or ``~/.cache``), and fails with "cannot cache function" when
    neither is writable: a package installed by another user, ``HOME`` unset or read-only.
    Then this process uses a private folder of its user in the temporary directory instead
    (``NUMBA_CACHE_DIR``, which a user may also set)."""
    configured = os.environ.get(CACHE_ENV)
    if configured and _writable(Path(configured)):
        return True
    package = Path(__file__).resolve().parent
    sources = [package, *(p for p in package.iterdir() if (p / "__init__.py").is_file())]
    if all(_writable(p / "__pycache__") for p in sources):
        return True
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    if _writable(Path(home) / "numba"):
        return True
    folder = Path(tempfile.gettempdir()) / f"near-dedup-numba-{os.getuid()}"
    if _own_folder(folder):
        os.environ[CACHE_ENV] = str(folder)
        return True
    try:  # the user's folder is taken (by another user): one of this process
        os.environ[CACHE_ENV] = tempfile.mkdtemp(prefix="near-dedup-numba-")
    except OSError:
        return False
    return True


CACHE = _choose_cache()

import numba  # noqa: E402 (after the cache folder is chosen)

__all__ = ["CACHE", "njit", "numba", "warm"]


def njit(*args: Any, **kwargs: Any) -> Callable:
    """``numba.njit``, caching compiled kernels on disk where `CACHE` allows it."""
    if not CACHE:
        kwargs["cache"] = False
    return numba.njit(*args, **kwargs)

_BLAS = "scipy.linalg.cython_blas"


def _load_array_math() -> None:
    if "numba.np.arraymath" in sys.modules:
        return
    hide = _BLAS not in sys.modules
    if hide:
        sys.modules[_BLAS] = None  # type: ignore[assignment]
    try:
        import numba.np.arraymath  # noqa: F401
    finally:
        if hide and sys.modules.get(_BLAS, 0) is None:
            del sys.modules[_BLAS]


def warm() -> None:
    """Build numba's CPU target now rather than at the first compiled call."""
    from numba.core.registry import cpu_target

    cpu_target.target_context.refresh()


_load_array_math()
