"""The one module the worker pool's forkserver imports (see `workers.process_pool`), and
only there: the server first ties itself to the command that started it
(`workers.guard_forkserver`), then imports the modules the command's workers run (named in
``NEAR_DEDUP_POOL_PRELOAD``), then runs their warm-ups: numba's CPU target when it loaded
compiled kernels (`jit.warm`), and ``warm_up()`` of each module named there that has one (the
normalization table, a scan's verification, contamination's probes). Each worker forked
from the server starts with all of it instead of loading it again."""

import os
import sys
from importlib import import_module

from near_dedup_core.workers import PRELOAD_ENV, guard_forkserver

guard_forkserver()
_named = [name for name in os.environ.get(PRELOAD_ENV, "").split(",") if name]
for _name in _named:
    import_module(_name)
if "near_dedup_core.jit" in sys.modules:
    sys.modules["near_dedup_core.jit"].warm()
for _name in _named:
    _warm_up = getattr(sys.modules[_name], "warm_up", None)
    if callable(_warm_up):
        _warm_up()
