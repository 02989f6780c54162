"""Imported first by the forkserver of the worker pool when it starts (see workers.py): the
server asks to be killed when the command process that started it dies (and leaves at once if
that process is already gone), and imports the rest of what it preloads with the bulk
collector threshold (`workers.guard_forkserver`). Importing it anywhere else does nothing."""

from near_dedup_core.workers import guard_forkserver

guard_forkserver()
