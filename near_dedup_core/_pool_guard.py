"""Imported first by the forkserver of the worker pool when it starts (see workers.py): the
server asks to be killed when the command process that started it dies, and imports the rest
of what it preloads with the bulk collector threshold (`collector.use_bulk_threshold`, as the
command process and every worker). Importing it anywhere else does nothing."""

import os

from near_dedup_core.collector import use_bulk_threshold
from near_dedup_core.workers import PARENT_ENV, die_with_parent

_parent = os.environ.get(PARENT_ENV)
if _parent is not None and _parent.isdigit() and os.getppid() == int(_parent):
    die_with_parent(int(_parent))
    use_bulk_threshold()
