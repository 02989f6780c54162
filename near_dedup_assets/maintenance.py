"""The index's maintenance as the release's last step (``index_maintenance``): on an Iceberg
index, `index compact` (each band bucket's files of the days merged into one) then `index
expire` (the snapshots no published state needs, and the data files only they read), their
one-line summaries shown as the asset's metadata in the UI. A SQLite or PostgreSQL index
needs none (the step says so).

Never under a running scan:

- it runs after the day's ``mixture``, which runs after the day's scan (and contamination
  report), so the day's own reads are over;
- it takes the ``index_writer`` pool (limit 1, ``dagster_home/dagster.yaml``) as the
  append-and-scan step of every day does, so no other day's scan runs meanwhile;
- a scan started outside the release: on a local index it holds the readers' lock, and the
  expiry is put off to the next day (the step says so, and the index is left as it was); with
  a shared catalog the expiry keeps the retention (24 h), so a scan shorter than that keeps
  the state it pinned (docs/iceberg.md, "Maintenance").
"""

from pathlib import Path

import dagster as dg

from near_dedup_core.errors import NearDedupError
from near_dedup_core.index_store import open_index

from near_dedup_assets import daily
from near_dedup_assets.assets import GROUP, INDEX_WRITER_POOL, MIXTURE, partition_failure
from near_dedup_assets.partitions import RELEASE_DAYS
from near_dedup_assets.resources import ReleaseSettings

#: The end of the line `index expire` refuses with while a scan holds the readers' lock.
SCAN_RUNNING = "a scan is reading it; expire old snapshots when no scan runs"


def maintain(index_path: str | Path) -> dict[str, str]:
    """Compact then expire the index at ``index_path`` if it is Iceberg tables: each
    action's one-line summary (an expiry put off while a scan reads the index says so)."""
    index = open_index(index_path)
    if index.kind != "iceberg":
        return {"maintenance": f"none: a {index.kind} index keeps no snapshots or data files "
                               f"to compact or expire"}
    done = {"compact": index.maintain("compact")}
    try:
        done["expire"] = index.maintain("expire")
    except NearDedupError as exc:
        if not str(exc).endswith(SCAN_RUNNING):
            raise
        done["expire"] = f"put off: {exc}"
    return done


@dg.asset(partitions_def=RELEASE_DAYS, group_name=GROUP, pool=INDEX_WRITER_POOL,
          deps=[MIXTURE], kinds={"python"})
def index_maintenance(context: dg.AssetExecutionContext,
                      release: ReleaseSettings) -> dg.MaterializeResult:
    """The index's maintenance after the day's release: on Iceberg tables, the band files
    compacted and the snapshots no published state needs expired (never under a running
    scan: see the module doc); nothing on SQLite and PostgreSQL."""
    with partition_failure():
        reason = daily.no_release(release, context.partition_key)
        if reason is not None:
            return dg.MaterializeResult(metadata={"maintenance": dg.MetadataValue.text(reason)})
        if not release.near_dedup_enabled:
            return dg.MaterializeResult(metadata={"maintenance": dg.MetadataValue.text(
                "none: near-dedup is disabled")})
        done = maintain(release.index_path)
    for line in done.values():
        context.log.info(line)
    return dg.MaterializeResult(metadata={k: dg.MetadataValue.text(v) for k, v in done.items()})
