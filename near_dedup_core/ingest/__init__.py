"""`index`: append one batch of snapshot packages to the index, as one transaction.

Pipeline (one pass over the packages' bytes, every core busy):

1. main process (`batch`): read and hash the data files as blocks of whole lines, in
   dependency order, and hand each block to a worker;
2. workers (`work`): parse and check the lines, take each record's compared text, skip
   the texts the index already knows by their raw sha256, normalize, sign and compress the
   rest;
3. main process (`batch`), block by block in input order: the checks across records, row
   ids for new contents, and the rows, inside the open transaction.

Any failure — a bad line in the last package, a limit, a crash or SIGKILL — leaves the index as
it was before the batch: the transaction is only committed at the end, and a brand-new index
is built in a temporary sibling file that is renamed into place after the commit.
Results do not depend on the number of workers.

Modules: `work` (the workers' side, step 2), `batch` (the main process's side, steps 1
and 3), `replay` (a worker's result kept for the rerun of a killed batch) and `run` (the
entry point, ``from near_dedup_core.ingest.run import index_packages``; a batch whose commit
another writer's beat runs again there). This package imports none of them: `work` imports neither SQLAlchemy nor
pydantic, so the pool's workers, which import it, start without them.
"""
