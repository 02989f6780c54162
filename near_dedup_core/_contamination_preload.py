"""Imported by the forkserver of `contamination`'s worker pool when it starts: loads the
compiled probe kernels there once (`contamination.warm_up`), so that each worker forked from
it has them instead of loading them itself. Importing it elsewhere costs the same load."""

from near_dedup_core.contamination import warm_up

warm_up()
