"""The command: eval items read, the anchor table built, the pool probed by a pool of
workers (from its packages, `probe_pool`, or from an index, `_probe_index`), the pairs put
in report order and the report frozen."""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np
from pydantic import BaseModel

from near_dedup_core import ALGORITHM_VERSION, __version__
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.contamination.dispatch import probe_workers, start_early
from near_dedup_core.contamination.items import EvalItem, SampleRef, open_evals, read_items
from near_dedup_core.contamination.kernels import EXTRA_HITS, first_last_found, widen
from near_dedup_core.contamination.pairs import (
    Pair,
    PairColumns,
    PairTable,
    in_report_order,
)
from near_dedup_core.contamination.probe import (
    ANCHOR_ORDER,
    BlockProbe,
    Hits,
    ProbeState,
    build_state,
    numbers_of,
    training_sample,
)
from near_dedup_core.contamination.report import (
    FORMAT,
    FORMAT_VERSION,
    AllowEntry,
    Candidates,
    Counts,
    EvalRef,
    FileLines,
    Files,
    Manifest,
    PackageEntry,
    PairLine,
    SetAsideLine,
    Span,
    Summary,
    TrainingRef,
    counts_of,
    summarize,
)
from near_dedup_core.contamination.setaside import (
    WORD,
    Allowlist,
    MatchColumns,
    read_allowlist,
    set_aside_columns,
)
from near_dedup_core.errors import NearDedupError, where
from near_dedup_core.fsutil import (
    write_checksums,
    write_json,
    write_jsonl,
)
from near_dedup_core.guard import guard_for
from near_dedup_core.package import (
    LineBlock,
    Package,
    SampleIds,
    ShardEnd,
    open_packages,
    read_blocks,
)
from near_dedup_core.progress import Progress, pause_point
from near_dedup_core.results import FolderResult
from near_dedup_core.signature import MinHasher, code_points
from near_dedup_core.storage import parse_location
from near_dedup_core.wording import count

if TYPE_CHECKING:
    from near_dedup_core.index_store import Index
    from near_dedup_core.workers import Executors

#: lines per block of the pool handed to a worker (`package.read_blocks`)
BLOCK_LINES = 1_024


def probe_pool(pool: list[Package], state: ProbeState, config: NearDedupConfig, workers: int,
                progress: bool, executor: str | Executors = "local"
                ) -> tuple[PairTable, int, int]:
    """Read the pool once as line blocks, which the workers parse and probe (`probe_block`);
    apply the rules across records in record order here, a ref taking its target's pairs.
    Returns (pairs, candidates, samples). The pairs stay columns (`PairTable`): a record's
    hits are a run of its block's rows, named by their first row among all blocks' rows, and
    a sample with pairs (its own record's, or its ref target's) is listed with that name."""
    pos = {p.package_id: i for i, p in enumerate(pool)}
    depended = {d for p in pool for d in p.depends_on}
    # (package, sample id) of a depended-on sample → the name of its hits (None: none),
    # its candidates, its domain
    targets: dict[tuple[str, str], tuple[int | None, int, str | None]] = {}
    rules = SampleIds(pool)
    parts: list[Hits] = []
    names: list[np.ndarray] = []  # each row's name: its record's first row
    rows = 0  # of all blocks so far
    held = array("q")  # the name of each sample with pairs
    packages = array("q")
    positions = array("q")
    refs: list[SampleRef] = []
    candidates = 0
    samples = 0
    bar = Progress("contamination: training records", sum(p.record_count for p in pool),
                   enabled=progress)
    pending: list[tuple[LineBlock | ShardEnd, Future | None]] = []

    def collect(event: LineBlock | ShardEnd, fut: Future | None) -> None:
        nonlocal candidates, samples, rows
        if isinstance(event, ShardEnd):
            if event.problem is not None:
                raise event.problem
            return
        assert fut is not None
        result: BlockProbe = fut.result()
        hits = result.hits  # in record order
        records = np.arange(len(result.ids))
        lo = np.searchsorted(hits.sample, records, side="left")
        first = (rows + lo).tolist()
        some = (np.searchsorted(hits.sample, records, side="right") > lo).tolist()
        if hits.size:
            parts.append(hits)
            names.append(rows + np.searchsorted(hits.sample, hits.sample, side="left"))
            rows += hits.size
        for k, sample_id in enumerate(result.ids):
            line = event.first_line + k
            ref = result.refs[k]
            rules.check(event.package_id, event.file, line, sample_id, ref)
            domain = result.domains[k]
            if ref is not None:
                name, count, target_domain = targets[ref]
                if domain is None:
                    domain = target_domain
            else:
                name, count = first[k] if some[k] else None, int(result.candidates[k])
            if event.package_id in depended:
                targets[(event.package_id, sample_id)] = (name, count, domain)
            samples += 1
            candidates += count
            if name is not None:
                held.append(name)
                packages.append(pos[event.package_id])
                positions.append(event.first_position + k)
                refs.append(SampleRef(pos[event.package_id], event.first_position + k,
                                      event.package_id, sample_id, event.split, event.file,
                                      line, domain))
        if result.problem is not None:
            raise result.problem
        bar.advance(len(result.ids))
        pause_point("contamination-pool")

    with probe_workers(executor, workers, state) as probes:
        for event in read_blocks(pool, BLOCK_LINES):
            fut = (probes.block(event, config.max_chars)
                   if isinstance(event, LineBlock) else None)
            pending.append((event, fut))
            while len(pending) > 3 * probes.parallelism:
                collect(*pending.pop(0))
        for job in pending:
            collect(*job)
    bar.finish()
    at = np.frombuffer(positions, dtype=np.int64)
    pairs = PairTable.join(np.frombuffer(held, dtype=np.int64), Hits.concat(parts),
                           np.concatenate(names) if names else np.zeros(0, np.int64),
                           np.frombuffer(packages, dtype=np.int64), at.__getitem__,
                           refs.__getitem__)
    return pairs, candidates, samples


#: distinct contents per job of `_probe_index`
CONTENT_CHUNK = 1_024


def _probe_index(index: Index, pool: list[Package], state: ProbeState,
                 config: NearDedupConfig, workers: int, progress: bool,
                 digests: Future, executor: str | Executors = "local"
                 ) -> tuple[PairTable, int, int]:
    """`probe_pool` over an indexed pool: its samples and their contents as one snapshot of
    the index holds them, each distinct content's normalized text probed once (by the
    workers, which read the texts on their own connections) and its pairs given to every
    sample that holds it. The data files, hashed meanwhile (``digests``: `_digests_aside`),
    must match their manifests, as for `scan`. The same pairs and counts as reading the
    packages: the index holds each compared text normalized, refs resolved to their
    target's content and domain, and ``max_chars`` was checked when the pool was indexed
    under the same config fingerprint."""
    from near_dedup_core import index_store as db
    from near_dedup_core.inputs import check_files, indexed_inputs

    with db.database_errors(index), db.open_snapshot(index, config) as snap, \
            probe_workers(executor, workers, state) as probes:
        indexed = indexed_inputs(snap.indexed_packages(), snap.path, pool)
        samples: list[list[tuple]] = []
        at: dict[int, int] = {}  # content row id -> its rank of first appearance
        ranks: list[int] = []  # each sample's content rank, in pool order
        fresh: list[int] = []
        jobs: list[tuple[list[int], Future]] = []
        for pkg in pool:  # the workers start on the first contents while the rest is read
            rows: list[tuple] = []
            for part in snap.sample_rows(indexed[pkg.package_id]):
                rows.extend(part)
                for row in part:
                    rank = at.get(row[6])
                    if rank is None:
                        rank = at[row[6]] = len(at)
                        fresh.append(row[6])
                    ranks.append(rank)
                while len(fresh) >= CONTENT_CHUNK:
                    ids, fresh = fresh[:CONTENT_CHUNK], fresh[CONTENT_CHUNK:]
                    jobs.append((ids, probes.contents(snap, ids)))
            samples.append(rows)
        if fresh:
            jobs.append((fresh, probes.contents(snap, fresh)))
        bar = Progress("contamination: distinct training texts", len(at), enabled=progress)
        parts: list[Hits] = []
        content: list[np.ndarray] = []  # each hit's content rank
        count = np.zeros(len(at), dtype=np.int64)
        for ids, fut in jobs:
            hits, per = fut.result()
            first = at[ids[0]]  # the job's contents have ranks first, first + 1, …
            count[first:first + len(ids)] = per
            if hits.size:
                parts.append(hits)
                content.append(first + hits.sample)
            bar.advance(len(ids))
            pause_point("contamination-pool")
        bar.finish()
        check_files(pool, digests.result())
        snap.verify_pages()  # nothing is published from a damaged index
    of_sample = np.asarray(ranks, dtype=np.int64)
    starts = np.cumsum([0] + [len(rows) for rows in samples])
    package = np.repeat(np.arange(len(samples), dtype=np.int64), np.diff(starts))

    def position(ks: np.ndarray) -> np.ndarray:
        return np.fromiter((samples[p][k - s][0] for k, p, s in zip(
            ks.tolist(), package[ks].tolist(), starts[package[ks]].tolist(), strict=True)),
            dtype=np.int64, count=len(ks))

    def sample_ref(k: int) -> SampleRef:
        p = int(package[k])
        at_, sample_id, split, file, line, domain, _ = samples[p][k - int(starts[p])]
        return SampleRef(p, at_, pool[p].package_id, sample_id, split, file, line, domain)

    pairs = PairTable.join(of_sample, Hits.concat(parts),
                           np.concatenate(content) if content else np.zeros(0, np.int64),
                           package, position, sample_ref)
    return pairs, int(count[of_sample].sum()), len(ranks)


def _digests_aside(paths: list[str]) -> Future:
    """The sha256 of each file, computed by a thread of its own while the caller reads the
    items and builds the anchors (hashlib runs without the GIL, on the core the worker pool
    does not use yet). A daemon thread: an error elsewhere does not wait for it."""
    import threading

    from near_dedup_core.inputs import file_digests

    out: Future = Future()

    def run() -> None:
        try:
            out.set_result(file_digests(paths))
        except BaseException as exc:  # noqa: BLE001 (handed to the caller through the future)
            out.set_exception(exc)

    threading.Thread(target=run, name="near-dedup-digests", daemon=True).start()
    return out


def _ref_json(ref: SampleRef, with_domain: bool) -> dict:
    out = {"package_id": ref.package_id, "sample_id": ref.sample_id, "split": ref.split,
           "file": ref.file, "line": ref.line}
    if with_domain:
        out["domain"] = ref.domain
    return out


def _package_entry(p: Package) -> PackageEntry:
    return PackageEntry(package_id=p.package_id, kind=p.kind,  # type: ignore[arg-type]
                        manifest_sha256=p.manifest_sha256, records=p.record_count,
                        path=str(p.path))


@dataclass
class ContaminationResult(FolderResult):
    """The contamination report a run froze."""

    def summary(self) -> str:
        c = self.counts
        return (f"contamination report {self.path}: {c['items_leaked']:,} of "
                f"{c['items_checked']:,} eval items leaked ({c['items_skipped_short']:,} "
                f"numbers alone, not items) into {c['training_samples_contaminated']:,} of "
                f"{count(c['training_samples'], 'training sample')}; {count(c['pairs'], 'pair')}; "
                f"{count(c['items_set_aside'], 'item')} set aside as common, template or "
                f"allowlisted")


@dataclass(frozen=True)
class Computed:
    """A contamination report's contents, as the models of `report` hold them."""

    lines: list[PairLine]
    set_aside: list[SetAsideLine]
    summary: Summary
    manifest: Manifest


def contamination_report(config: NearDedupConfig, eval_paths: Sequence[str | Path],
                         pool_paths: Sequence[str | Path], output_dir: str | Path, *,
                         workers: int = 1, progress: bool = False,
                         index: Index | None = None,
                         executor: str | Executors = "local",
                         allowlist: str | Path | None = None) -> ContaminationResult:
    """Check every eval item against every training sample of the pool; freeze the report
    in ``output_dir`` (docs/contamination.md). Nothing is written on any error. With
    ``index`` (the backend `index_store.open_index` made of a SQLite path, a PostgreSQL URL
    or an Iceberg location, holding every pool package, as for `scan`),
    the pool's normalized texts are read from the index instead of parsed and normalized
    again (`_probe_index`); the report is the same bytes. ``allowlist`` (a file,
    `setaside.read_allowlist`) overrides the config's ``contamination_allowlist``."""
    output = parse_location(output_dir)
    evals_p = [parse_location(p) for p in eval_paths]
    pool_p = [parse_location(p) for p in pool_paths]
    output.require_new_output(outside=evals_p + pool_p)
    allow_file = allowlist if allowlist is not None else config.contamination_allowlist
    entries = read_allowlist(allow_file) if allow_file is not None else []
    pool = open_packages(pool_p)
    evals = open_evals([p.local_path or p.url for p in evals_p])
    computed = compute(config, evals, pool, workers=workers, progress=progress, index=index,
                       executor=executor, allowlist=entries)
    with output.publish() as tmp:
        write_jsonl(tmp / "contamination.jsonl", report_lines(computed.lines))
        write_jsonl(tmp / "set_aside.jsonl", report_lines(computed.set_aside))
        write_json(tmp / "summary.json", computed.summary.model_dump(mode="json"))
        write_json(tmp / "manifest.json", computed.manifest.model_dump(mode="json",
                                                                       by_alias=True))
        write_checksums(tmp)
    return ContaminationResult(output.local_path or output.url,
                               computed.manifest.counts.model_dump())


def report_lines(lines: Sequence[BaseModel]) -> list[dict]:
    """The lines of ``contamination.jsonl`` as JSON objects."""
    return [line.model_dump(mode="json") for line in lines]


def match_columns(pairs: PairTable, c: PairColumns, items: list[EvalItem],
                  state: ProbeState, allow: Allowlist,
                  span_of: Callable[[Pair], tuple[int, int]]) -> MatchColumns:
    """The pairs (in report order, ``c`` their columns) as the set-aside rule counts them:
    whole when every shingle (containment) or word (exact) of the item is in the match; the
    item's matched text (its span, `item_span`) is looked up only when there is an
    allowlist."""
    size = np.diff(state.item_start)[c.item]
    words = {i: len(WORD.findall(items[i].text)) for i in np.unique(c.item[c.exact]).tolist()}
    size[c.exact] = [words[i] for i in c.item[c.exact].tolist()]
    short = np.asarray([x is not None for x in state.short_numbers], dtype=bool)
    entry = None
    if allow.entries:
        entry = np.empty(len(pairs), dtype=np.int64)
        for k, p in enumerate(pairs):
            start, end = span_of(p)
            e = allow.entry_of(items[p.item].text[start:end])
            entry[k] = -1 if e is None else e
    return MatchColumns(c.item, (c.package << 40) | c.position, c.common == size,
                        short[c.item], entry)


def compute(config: NearDedupConfig, evals: list[Package], pool: list[Package], *,
            workers: int = 1, progress: bool = False, index: Index | None = None,
            executor: str | Executors = "local",
            allowlist: Sequence[AllowEntry] = ()) -> Computed:
    """The report of these opened eval and pool packages (`contamination_report` without
    the writing; `verify.rederive` runs it again to re-check a report, with the allowlist
    entries the report records)."""
    pool_ids = {p.package_id for p in pool}
    for e in evals:
        if e.package_id in pool_ids:
            raise NearDedupError(f"{where(e.package_id)}: given both as an eval package and as "
                                 f"an input; an eval set is not training data")
    config.check_pool_records(sum(p.record_count for p in pool))
    digests = None
    backend = index
    if index is not None:
        from near_dedup_core.inputs import data_files

        digests = _digests_aside(data_files(pool))
    start_early(executor, workers)  # a local pool's start overlaps reading the items below
    items, per_eval, skipped = read_items(evals, pool[0].kind, config, progress)
    state, n_anchors = build_state(items, config, training_sample(pool, config))
    if backend is not None and digests is not None:
        pairs, candidates, samples = _probe_index(backend, pool, state, config, workers, progress,
                                                  digests, executor)
    else:
        pairs, candidates, samples = probe_pool(pool, state, config, workers, progress,
                                                 executor)
    pairs, columns = in_report_order(pairs, items)
    allow = Allowlist(allowlist)
    hasher = MinHasher(1, config.seed, config.shingle_size)
    spans: dict[tuple[int, str, str], tuple[int, int]] = {}  # a common text matches alike

    def span_of(p: Pair) -> tuple[int, int]:
        got = spans.get((p.item, p.method, p.text))
        if got is None:
            got = spans[(p.item, p.method, p.text)] = item_span(items[p.item].text, p, hasher)
        return got

    kept, aside = set_aside_columns(match_columns(pairs, columns, items, state, allow,
                                                  span_of),
                                    config.contamination_common_samples,
                                    config.contamination_template_samples)
    lines = report_pairs(config, items, [(pairs[k], span_of(pairs[k])) for k in kept])
    aside_lines = [SetAsideLine.model_validate({
        "eval": EvalRef(**_ref_json(items[a.item].ref, False)), "field": items[a.item].field,
        "reason": a.reason, "training_samples": a.samples, "allowlist_entry": a.entry,
        "example": TrainingRef(**_ref_json(pairs[a.first].sample, True)),
        "training_text": pairs[a.first].text}) for a in aside]
    eval_counts = [{"package_id": e.package_id, "items": per_eval[e.package_id],
                    "items_checked": per_eval[e.package_id] - skipped[e.package_id],
                    "items_skipped_short": skipped[e.package_id]} for e in evals]
    summary = cast(Summary, summarize(lines, eval_counts, samples, aside_lines))
    manifest = Manifest(
        format=FORMAT, format_version=FORMAT_VERSION, tool_version=__version__,
        algorithm_version=ALGORITHM_VERSION, config=config.model_dump(mode="json"),
        candidates=Candidates(filter="prefix", order=ANCHOR_ORDER, extra_hits=EXTRA_HITS,
                              anchors=n_anchors, verified=candidates),
        evals=[_package_entry(e) for e in evals], inputs=[_package_entry(p) for p in pool],
        counts=cast(Counts, counts_of(summary)), allowlist=allow.entries,
        files=Files(pairs=FileLines(lines=len(lines)),
                    set_aside=FileLines(lines=len(aside_lines))))
    return Computed(lines, aside_lines, summary, manifest)


def report_pairs(config: NearDedupConfig, items: list[EvalItem],
                 pairs: list[tuple[Pair, tuple[int, int]]]) -> list[PairLine]:
    """The pair lines (each pair with its item span, `item_span`), one per (eval record,
    training sample): the first of the record's items (`items.FIELDS` order) that the
    sample contains."""
    hasher = MinHasher(1, config.seed, config.shingle_size)
    guard = guard_for(config, frozenset())
    item_numbers: dict[int, tuple[str, ...]] = {}
    lines = []
    seen: set[tuple] = set()
    for pair, (start, end) in pairs:
        item = items[pair.item]
        key = (item.ref.key(), pair.sample.key())
        if key in seen:
            continue
        seen.add(key)
        size = (len(WORD.findall(item.text)) if pair.method == "exact" else
                len(hasher.shingle_set(item.text)))
        differ = False
        if pair.compare_numbers:
            numbers = item_numbers.get(pair.item)
            if numbers is None:
                numbers = item_numbers[pair.item] = numbers_of(guard, item.text)
            differ = numbers_of(guard, pair.text) != numbers
        lines.append(PairLine(
            eval=EvalRef(**_ref_json(item.ref, False)),
            training=TrainingRef(**_ref_json(pair.sample, True)),
            containment=pair.common / size, item_shingles=size,
            common_shingles=pair.common, span=Span(start=pair.start, end=pair.end),
            numbers_differ=differ, field=item.field,  # type: ignore[arg-type]
            method=pair.method,  # type: ignore[arg-type]
            item_span=Span(start=start, end=end), item_text=item.text[start:end],
            training_text=pair.text))
    return lines


def item_span(item: str, pair: Pair, hasher: MinHasher) -> tuple[int, int]:
    """[start, end) of what matched in the item's normalized text: an exact match's first
    to last word; else `_item_span`."""
    if pair.method == "exact":
        words = list(WORD.finditer(item))
        return words[0].start(), words[-1].end()
    return _item_span(item, pair.text, hasher)


def _item_span(item: str, matched: str, hasher: MinHasher) -> tuple[int, int]:
    """[start, end) in the item of its shingles found in the matched training text, from
    the first to the end of the last, widened to whole words."""
    first, last = first_last_found(code_points([item])[0], code_points([matched])[0],
                                   hasher.shingle_size, hasher.shingle_seed)
    if first == -1:
        return 0, len(item)
    return widen(item, int(first), min(int(last) + hasher.shingle_size, len(item)))
