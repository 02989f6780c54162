"""The scan's entry point: check the inputs and the output folder, then run the five stages
on one snapshot of the index (pool, candidates, verify, decide, write)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from near_dedup_core import index_store as db
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.fsutil import require_new_output_outside
from near_dedup_core.package import Package, open_packages
from near_dedup_core.progress import pause_point
from near_dedup_core.report import decision_summary
from near_dedup_core.scan.candidates import find_candidates
from near_dedup_core.scan.decide import decide
from near_dedup_core.scan.pool import build_nodes, load_pool, verify_files
from near_dedup_core.scan.verify import verify_candidates
from near_dedup_core.scan.write import write_report


@dataclass
class ScanResult:
    output: Path
    counts: dict

    def summary(self) -> str:
        c = self.counts
        return (f"report {self.output}: {c['samples']:,} samples, {decision_summary(c)}; "
                f"{c['relations']:,} relations, "
                f"{c['history_only_relations']:,} history-only, {c['blocked_relations']:,} "
                f"blocked by the numeric/unit guard")


def scan_pool(index_path: str | Path, config: NearDedupConfig,
              package_paths: Sequence[str | Path], output_dir: str | Path, *,
              workers: int = 1, executor: str = "local",
              progress: bool = False) -> ScanResult:
    """Freeze the report of the pool ``package_paths`` into ``output_dir`` (see the package
    doc)."""
    output = Path(output_dir)
    if db.postgres_url(index_path) is None:
        index_path = Path(index_path)
    paths = [Path(p) for p in package_paths]
    require_new_output_outside(output, paths)
    pkgs = open_packages(paths)
    config.check_pool_records(sum(p.record_count for p in pkgs))
    try:
        return _scan(index_path, config, pkgs, output, workers, executor, progress)
    except (LookupError, ValueError, TypeError, AttributeError) as exc:
        if isinstance(index_path, Path):
            db.raise_if_damaged(index_path, exc)
        raise


def _scan(index_path: Path | str, config: NearDedupConfig, pkgs: list[Package], output: Path,
          workers: int, executor: str, progress: bool) -> ScanResult:
    with db.database_errors(index_path), db.open_snapshot(index_path, config) as snap:
        pool = load_pool(snap, snap.path, pkgs)
        verify_files(pkgs)
        nodes = build_nodes(pool)
        cand = find_candidates(snap, pool, nodes, config, progress)
        pause_point("scan-verify")
        near, hist = verify_candidates(snap, pool, nodes, cand, config, workers, progress,
                                       executor)
        decisions = decide(pool, nodes, near, hist, config)
        counts = write_report(output, snap, pool, nodes, decisions, near, hist, cand, config)
    return ScanResult(output, counts)
