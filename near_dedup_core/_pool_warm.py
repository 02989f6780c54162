"""Imported by the worker pool's forkserver (see workers.py) when the command process runs
compiled kernels: builds numba's CPU target once, so that the workers forked from the server
inherit it instead of each building it (about 0.1 s of CPU per worker)."""

from near_dedup_core import jit

jit.warm()
