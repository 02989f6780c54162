"""Imported by the worker pool's forkserver (see workers.py) when the command's process or
its workers run compiled kernels, last: builds numba's CPU target once, the
normalization table when the command normalizes text (`normalize.build_table`), and runs the
scan's verification once when it verifies (`scan.verify.warm_up`: its kernels and the guard),
so that the workers forked from the server inherit all of it instead of each building it
(about 0.1 s of CPU per worker each; without the table, a worker would normalize its small
batches, such as the few unknown texts of a cumulative snapshot's block, one text at a
time)."""

import sys

from near_dedup_core import jit

jit.warm()
if "near_dedup_core.normalize" in sys.modules:
    sys.modules["near_dedup_core.normalize"].build_table()
if "near_dedup_core.scan.verify" in sys.modules:
    sys.modules["near_dedup_core.scan.verify"].warm_up()
