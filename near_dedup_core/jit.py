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

import sys

import numba

__all__ = ["numba", "warm"]

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
