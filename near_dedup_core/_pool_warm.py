"""Imported by the worker pool's forkserver (see workers.py) when the command process runs
compiled kernels, after the command's own modules: builds numba's CPU target once, and the
normalization table when the command normalizes text (`normalize.build_table`), so that the
workers forked from the server inherit both instead of each building them (about 0.1 s of
CPU per worker each; without the table, a worker would normalize its small batches, such
as the few unknown texts of a cumulative snapshot's block, one text at a time)."""

import sys

from near_dedup_core import jit

jit.warm()
if "near_dedup_core.normalize" in sys.modules:
    sys.modules["near_dedup_core.normalize"].build_table()
