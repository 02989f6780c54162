"""The scan's entry point: check the inputs and the output folder, then run the five stages
on one snapshot of the index (pool, candidates, verify, decide, write).

The main process is the one serial path (pool, candidates, decisions, report), so work that
needs nothing from it runs beside it, with ``--workers`` ≥ 2 and the local executor: once
the inputs are known to be indexed, a worker re-hashes the data files, then writes
``origins.jsonl`` and reads the samples' text digests (on a connection of its own: a
package's sources never change once committed), all in one task (`side_work`), while the main
process loads the pool and finds candidates (the main process waits for that task before
anything can fail for another reason, so a changed file is still reported first, and the task
stops at a changed file); the pool's candidate pairs go to the
workers before the history is looked up; while the workers verify, the main process prepares
the report's other columns (`report_columns`: sample ids, content ids) and reads the pool's
contents' sources outside the pool (`pool_outside_sources`); and at the end it
writes ``relations.jsonl`` while a thread writes ``decisions.jsonl`` (a thread started, and
the kernels of the main process loaded, at the start: `reserve`). With one worker
everything runs in order, inline; with Ray the side work runs in a thread of the main
process (Ray tasks may run on machines without the packages or the index file)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from near_dedup_core import index_store as db
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.package import Package, open_packages
from near_dedup_core.progress import Progress, pause_point
from near_dedup_core.report import decision_summary
from near_dedup_core.results import FolderResult
from near_dedup_core.scan.candidates import history_and_limits, pool_candidates
from near_dedup_core.scan.decide import decide
from near_dedup_core.scan.pool import (
    build_nodes,
    check_files,
    data_files,
    expected_digests,
    file_digests,
    indexed_inputs,
    load_pool,
)
from near_dedup_core.scan.records import ByteStrings
from near_dedup_core.scan.reserve import reserved
from near_dedup_core.scan.verify import VerifyJob
from near_dedup_core.scan.write import (
    pool_outside_sources,
    report_columns,
    text_digests,
    write_origins,
    write_report,
)
from near_dedup_core.storage import Location, parse_location
from near_dedup_core.takedown.match import find_takedowns, per_node
from near_dedup_core.wording import count
from near_dedup_core.workers import POOL_RECORDS, Executors, choose_executor, submit_in_turn


@dataclass
class ScanResult(FolderResult):
    """The report a scan froze."""

    def summary(self) -> str:
        c = self.counts
        return (f"report {self.path}: {count(c['samples'], 'sample')}, {decision_summary(c)}; "
                f"{count(c['relations'], 'relation')}, "
                f"{c['history_only_relations']:,} history-only, {c['blocked_relations']:,} "
                f"blocked by the numeric/unit guard")


def scan_pool(index: str | Path | db.Index, config: NearDedupConfig,
              package_paths: Sequence[str | Path], output_dir: str | Path, *,
              workers: int = 1, executor: str | Executors = "local",
              progress: bool = False) -> ScanResult:
    """Freeze the report of the pool ``package_paths`` into ``output_dir`` (see the package
    doc); ``executor`` and ``workers`` say where the verification runs
    (`workers.choose_executor`)."""
    chosen = choose_executor(executor, workers)
    output = parse_location(output_dir)
    index = db.open_index(index)
    paths = [parse_location(p) for p in package_paths]
    output.require_new_output(outside=paths)
    pkgs = open_packages(paths)
    config.check_pool_records(sum(p.record_count for p in pkgs))
    try:
        return _scan(index, config, pkgs, output, chosen, progress)
    except (LookupError, ValueError, TypeError, AttributeError) as exc:
        index.raise_if_damaged(exc)
        raise


def side_work(paths: list[str], expected: list[str], location: str, rowids: list[int],
              package_ids: list[str], origins_path: Path
              ) -> tuple[list[str], tuple[int, str] | None, ByteStrings | None]:
    """A scan's side work in one worker: the digests of the data files (`file_digests`),
    then, unless one differs from ``expected`` (the caller reports that first),
    ``origins.jsonl`` (`write_origins`) and the samples' text digests (`text_digests`), both
    read on a connection of their own to the index at ``location``."""
    digests = file_digests(paths)
    if digests != expected:
        return digests, None, None
    return (digests, write_origins(location, rowids, package_ids, origins_path),
            text_digests(location, rowids))


def _part(whole: Future, k: int) -> Future:
    """A future of item ``k`` of ``whole``'s result (its exception, if it fails)."""
    part: Future = Future()

    def settle(done: Future) -> None:
        exc = done.exception()
        if exc is not None:
            part.set_exception(exc)
        else:
            part.set_result(done.result()[k])

    whole.add_done_callback(settle)
    return part


class _Pools(NamedTuple):
    """Where a scan's verify chunks and its side work run."""

    executor: Executors  # the executor for this much work
    verify: Executor
    side: Executor
    side_remote: bool  # the side work runs in a worker process (reading the index itself)
    side_thread: bool  # the side work runs in a thread of this process


@contextmanager
def _pools(executor: Executors, records: int) -> Iterator[_Pools]:
    """The running executor for ``records`` samples, and where the side work runs beside
    it: in the pool when its workers read the index, in a thread of this process when
    they cannot, inline when the pool itself is."""
    executor = executor.for_work(records, POOL_RECORDS)
    with executor.start() as ex:
        if executor.in_process:
            yield _Pools(executor, ex, ex, False, False)
        elif executor.workers_read_index:
            yield _Pools(executor, ex, ex, True, False)
        else:
            with ThreadPoolExecutor(max_workers=1) as thread:
                yield _Pools(executor, ex, thread, False, True)


#: What `scan` does after each of its stages, as its progress shows it.
STAGES = ("pool loaded; finding candidate pairs", "looking up the indexed history",
          "verifying pairs", "deciding", "writing the report", "checking the index's pages")


def _scan(index: db.Index, config: NearDedupConfig, pkgs: list[Package], output: Location,
          executor: Executors, progress: bool) -> ScanResult:
    with index.errors(), index.snapshot(config) as snap, \
            output.publish() as folder, \
            _pools(executor, sum(p.record_count for p in pkgs)) as pools, \
            reserved(pools.executor.in_process) as writer:
        # (the writer thread has written, and the pool is left, its workers stopped, before
        # the staging folder is removed; the writer thread and the kernels are taken before
        # the scan's memory grows: `reserve`)
        indexed_rows = snap.indexed_packages()
        indexed = indexed_inputs(indexed_rows, snap.path, pkgs)
        if not pools.executor.in_process:  # a per-bucket history join's tasks run there
            snap.join_executor = pools.verify
        index.read_ahead()  # an index of this config, holding every input
        rowids = [indexed[p.package_id].rowid for p in pkgs]
        origins_args = (rowids, [p.package_id for p in pkgs], folder / "origins.jsonl")
        side_origins: Future | None = None  # inline: written after the candidates (below)
        side_digests: Future | None = None
        side = pools.side
        if pools.side_remote:
            # one worker re-hashes the data files, then writes origins.jsonl and reads the
            # samples' text digests on a connection of its own, while this process loads the
            # pool and finds candidates: one task, so that no part of it can be queued behind
            # the verify chunks (and run alone after them, the other worker idle)
            (done,) = submit_in_turn(side, [(side_work, data_files(pkgs), expected_digests(pkgs),
                                             snap.location, *origins_args)])
            digests = _part(done, 0)
            side_origins, side_digests = _part(done, 1), _part(done, 2)
        else:
            digests = side.submit(file_digests, data_files(pkgs))
            if pools.side_thread:  # on a connection of its own
                side_origins = side.submit(write_origins, snap.location, *origins_args)
        stages = Progress("scan", len(STAGES), enabled=progress)
        pool = load_pool(snap, indexed_rows, pkgs, domains=bool(config.extra_units))
        try:
            nodes = build_nodes(pool)
            stages.step(STAGES[0])
            found = pool_candidates(snap, pool, nodes, config)
            stages.step(STAGES[1])
            job = VerifyJob(snap, pool, nodes, config, pools.verify, pools.executor, progress)
            job.add_pool(found.pairs)  # the workers verify while the history is looked up
            cand = history_and_limits(snap, pool, nodes, config, found)
            stages.step(STAGES[2])
        except Exception:
            check_files(pkgs, digests.result())
            raise
        check_files(pkgs, digests.result())
        pause_point("scan-verify")
        job.add_history(cand.history_pairs)
        origins = side_origins.result() if side_origins is not None else \
            write_origins(snap, *origins_args)
        columns = report_columns(pool, side_digests.result() if side_digests is not None
                                 else text_digests(snap, rowids))
        pool_outside = pool_outside_sources(snap, pool, nodes)
        hits = find_takedowns(snap, pool.contents, config)
        down = per_node(hits, nodes.content) if hits is not None else None
        near, hist = job.collect()
        stages.step(STAGES[3])
        decisions = decide(nodes, near, config, *((down.down, down.jaccard) if down else ()))
        stages.step(STAGES[4])
        counts = write_report(folder, snap, pool, nodes, decisions, near, hist, cand, config,
                              columns, origins, pool_outside, writer, hits, down)
        stages.step(STAGES[5])
        snap.verify_pages()  # nothing is published from a damaged index
        stages.finish()
    return ScanResult(output.local_path or output.url, counts)
