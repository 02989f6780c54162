"""`scan`: freeze the near-dedup report of one input pool, reading the index only.

Stages, each producing what the next one needs:

1. **pool** — the input packages' samples and their contents, loaded from the index (every
   input must be indexed with the same manifest; the data files are re-hashed against it).
   A *node* is one content within one split: only nodes of the same split and scope are
   ever compared, and all samples of a node are exact duplicates of each other.
2. **candidates** — LSH: nodes sharing a band key within one (scope, split) group, plus
   indexed history contents sharing a band key (looked up in the index's band table). Texts
   under ``min_chars`` have no band keys: they match exactly only. A node with more than
   ``max_candidates`` candidates stops the scan (exit 2).
3. **filters** — two cheap bounds that provably keep recall: the set-size ratio
   (``J ≤ min(|A|,|B|) / max(|A|,|B|)``) and signature agreement: a pair at exactly the
   threshold agrees on a position with probability ``t``, so agreement below
   ``min_agreement`` (the ``1e-6`` quantile of Binomial(num_perm, t)) is dropped; pairs
   with higher true Jaccard are dropped even less often.
4. **verify** — exact Jaccard of the hashed shingle sets, recomputed from the normalized texts
   stored in the index, in parallel workers; pairs at or above the threshold are relations;
   the numeric/unit guard marks those it keeps apart (``blocked_by``).
5. **decide** — greedy in first-ingest order (see report.py for the files written).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numba
import numpy as np

from near_dedup_core import index_store as db
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.errors import LimitExceeded, NearDedupError, where
from near_dedup_core.fsutil import is_within, require_new_output, sha256_file
from near_dedup_core.guard import guard_for
from near_dedup_core.package import Package, open_packages
from near_dedup_core.progress import Progress, pause_point
from near_dedup_core.signature import MinHasher, band_keys, exact_jaccard
from near_dedup_core.workers import process_pool

VERIFY_CHUNK = 20_000


def min_agreement(num_perm: int, threshold: float, tail: float = 1e-6) -> int:
    """Largest k with P(Binomial(num_perm, threshold) < k) ≤ tail: pairs agreeing on fewer
    than k signature positions are below the threshold but for a ``tail`` chance."""
    cdf = 0.0
    for k in range(num_perm + 1):
        p = math.comb(num_perm, k) * threshold**k * (1 - threshold) ** (num_perm - k)
        if cdf + p > tail:
            return k
        cdf += p
    return num_perm


# --------------------------------------------------------------------------- stage 1: pool


@dataclass(slots=True)
class Sample:
    input_pos: int
    package_id: str
    package_batch: int
    sample_id: str
    split: str
    file: str
    line: int
    position: int
    text_sha256: bytes
    domain: str | None
    source: str | None
    content: int  # contents.id


@dataclass
class Pool:
    packages: list[Package]
    package_batch: dict[str, int]
    samples: list[Sample]
    content: dict[int, db.ContentRow]  # per content row id
    scope_labels: dict[int, str]
    index_packages: list[dict]
    index_batches: int
    index_contents: int


def _verify_files(pkgs: list[Package]) -> None:
    jobs = [(pkg, entry) for pkg in pkgs for entry in pkg.files]
    with ThreadPoolExecutor(max_workers=2) as ex:
        digests = list(ex.map(lambda job: sha256_file(job[0].path / job[1].path), jobs))
    for (pkg, entry), digest in zip(jobs, digests):
        if digest != entry.sha256:
            raise NearDedupError(f"{where(pkg.package_id, entry.path)}: sha256 does not match "
                                 f"manifest.json (file changed after it was indexed)")


def load_pool(snap: db.IndexSnapshot, index_path: Path | str, pkgs: list[Package]) -> Pool:
    rows = snap.indexed_packages()
    indexed = {r.package_id: r for r in rows}
    for pkg in pkgs:
        known = indexed.get(pkg.package_id)
        if known is None:
            raise NearDedupError(f"{where(pkg.package_id)}: not in index {index_path}; "
                                 f"index it first")
        if known.manifest_sha256 != pkg.manifest_sha256:
            raise NearDedupError(f"{where(pkg.package_id, 'manifest.json')}: indexed with "
                                 f"manifest sha256 {known.manifest_sha256[:12]}…, this one is "
                                 f"{pkg.manifest_sha256[:12]}…; index it first under a new id")
    samples: list[Sample] = []
    for pos, pkg in enumerate(pkgs):
        package = indexed[pkg.package_id]
        for r in snap.package_sources(package):
            samples.append(Sample(pos, pkg.package_id, package.batch, r.sample_id, r.split,
                                  r.file, r.line, r.position, r.text_sha256, r.domain, r.source,
                                  r.content))
    content = snap.content_rows(sorted({s.content for s in samples}))
    counts = snap.counts()
    return Pool(
        packages=pkgs, package_batch={r.package_id: r.batch for r in rows}, samples=samples,
        content=content, scope_labels=snap.scope_labels(),
        index_packages=[{"package_id": r.package_id, "kind": r.kind,
                         "manifest_sha256": r.manifest_sha256, "batch": r.batch} for r in rows],
        index_batches=counts.batches, index_contents=counts.contents)


# --------------------------------------------------------------------------- nodes


@dataclass
class Node:
    """One content within one split of the pool; samples in decision order."""

    content: int
    split: str
    samples: list[Sample] = field(default_factory=list)


def order_key(pool: Pool, s: Sample) -> tuple:
    """Decision order (SPEC §4 scan): first-ingest order of the sample's content, then the
    batch that indexed the sample's package, then input position, then sample id."""
    row = pool.content[s.content]
    return (row.batch, row.content_id, s.package_batch, s.input_pos, s.sample_id)


def build_nodes(pool: Pool) -> list[Node]:
    by_key: dict[tuple[int, str], Node] = {}
    for s in sorted(pool.samples, key=lambda s: order_key(pool, s)):
        node = by_key.get((s.content, s.split))
        if node is None:
            node = by_key[(s.content, s.split)] = Node(s.content, s.split)
        node.samples.append(s)
    return list(by_key.values())  # insertion order = order of each node's first sample


# --------------------------------------------------------------------------- stage 2/3


@dataclass
class Candidates:
    """Filtered candidate pairs: pool pairs as node indexes (a < b), history pairs as
    (node index, history content rowid)."""

    pool_pairs: np.ndarray
    history_pairs: list[tuple[int, int]]
    history: dict[int, db.ContentRow]
    lsh_pairs: int = 0  # distinct candidate pairs before the filters


@numba.njit(cache=True)
def _run_pairs(order, run_starts, run_sizes, raw_counts):
    """All (i, j) pairs, i < j, of the members of each run of ``order``; adds each member's
    run size − 1 to ``raw_counts``."""
    total = 0
    for r in range(run_sizes.shape[0]):
        total += run_sizes[r] * (run_sizes[r] - 1) // 2
    out = np.empty((total, 2), dtype=np.int64)
    k = 0
    for r in range(run_sizes.shape[0]):
        s = run_starts[r]
        n = run_sizes[r]
        for x in range(n):
            a = order[s + x]
            raw_counts[a] += n - 1
            for y in range(x + 1, n):
                b = order[s + y]
                if a < b:
                    out[k, 0] = a
                    out[k, 1] = b
                else:
                    out[k, 0] = b
                    out[k, 1] = a
                k += 1
    return out


@numba.njit(cache=True)
def _filter_pairs(left, right, sigs_l, sizes_l, sigs_r, sizes_r, threshold, agree_min):
    """Mask of pairs (sigs_l[left[k]], sigs_r[right[k]]) that pass the set-size ratio bound and
    the signature-agreement bound."""
    keep = np.zeros(left.shape[0], dtype=np.bool_)
    for k in range(left.shape[0]):
        a = left[k]
        b = right[k]
        lo = min(sizes_l[a], sizes_r[b])
        hi = max(sizes_l[a], sizes_r[b])
        if lo < threshold * hi:
            continue
        agree = 0
        for p in range(sigs_l.shape[1]):
            if sigs_l[a, p] == sigs_r[b, p]:
                agree += 1
        keep[k] = agree >= agree_min
    return keep


def _pool_lsh_pairs(keys: np.ndarray, groups: np.ndarray, raw_counts: np.ndarray,
                    limit: int, too_many: Callable[[int, int], LimitExceeded]) -> np.ndarray:
    """Distinct (i, j), i < j, of long-node slots sharing a band key within one (scope,
    split) group, one band at a time: sort by (group, key), pairs within equal runs."""
    n = len(groups)
    chunks = []
    for b in range(keys.shape[1]):
        order = np.lexsort((keys[:, b], groups))
        g_sorted, k_sorted = groups[order], keys[order, b]
        boundary = np.ones(n + 1, dtype=bool)
        if n > 1:
            boundary[1:-1] = (g_sorted[1:] != g_sorted[:-1]) | (k_sorted[1:] != k_sorted[:-1])
        starts = np.flatnonzero(boundary)
        run_sizes = np.diff(starts)
        too_big = np.flatnonzero(run_sizes - 1 > limit)
        if len(too_big):
            r = int(too_big[0])
            raise too_many(int(order[starts[r]]), int(run_sizes[r]) - 1)
        multi = run_sizes >= 2
        if multi.any():
            chunks.append(_run_pairs(order.astype(np.int64), starts[:-1][multi].astype(np.int64),
                                     run_sizes[multi].astype(np.int64), raw_counts))
    if not chunks:
        return np.zeros((0, 2), dtype=np.int64)
    flat = np.sort(np.concatenate([p[:, 0] * n + p[:, 1] for p in chunks]))
    flat = flat[np.concatenate(([True], flat[1:] != flat[:-1]))]
    return np.stack([flat // n, flat % n], axis=1)


def _history_hits(snap: db.IndexSnapshot, keys: np.ndarray, nodes: list[Node],
                  pool_nodes: set[tuple[int, str]]) -> dict[int, set[int]]:
    """Indexed contents outside the pool sharing a band key with a long-node slot, looked up
    in the index's band table: content -> slots."""
    hits: dict[int, set[int]] = defaultdict(set)
    if not len(keys):
        return hits
    flat_keys = keys.reshape(-1)
    by_key = np.argsort(flat_keys, kind="stable")
    sorted_keys = flat_keys[by_key]
    slot_of = (by_key // keys.shape[1]).astype(np.int64)
    distinct = sorted_keys[np.concatenate(([True], sorted_keys[1:] != sorted_keys[:-1]))]
    # distinct keys in key order: the probes walk the band B-tree in order
    found = snap.history_band_hits(distinct, sorted({n.content for n in nodes}), pool_nodes)
    if len(found.keys):
        lo = np.searchsorted(sorted_keys, found.keys, side="left")
        hi = np.searchsorted(sorted_keys, found.keys, side="right")
        for content, l, h in zip(found.contents.tolist(), lo.tolist(), hi.tolist()):
            hits[content].update(slot_of[l:h].tolist())
    return hits


def find_candidates(snap: db.IndexSnapshot, pool: Pool, nodes: list[Node],
                    config: NearDedupConfig, progress: bool) -> Candidates:
    threshold = config.threshold
    agree_min = min_agreement(config.num_perm, threshold)
    long_nodes = [i for i, n in enumerate(nodes) if pool.content[n.content].signature is not None]
    n_long = len(long_nodes)
    sigs = np.zeros((n_long, config.num_perm), dtype=np.uint16)
    sizes = np.zeros(n_long, dtype=np.int64)
    group_of: dict[tuple[int, str], int] = {}
    groups = np.zeros(n_long, dtype=np.int64)
    if n_long:
        sigs = np.frombuffer(b"".join(pool.content[nodes[i].content].signature  # type: ignore[misc]
                                      for i in long_nodes),
                             dtype=np.uint16).reshape(n_long, config.num_perm)
    for j, i in enumerate(long_nodes):
        row = pool.content[nodes[i].content]
        sizes[j] = row.shingles
        groups[j] = group_of.setdefault((row.scope, nodes[i].split), len(group_of))
    keys = band_keys(sigs, config.bands, config.rows) if n_long else np.zeros((0, config.bands), np.int64)

    def too_many(slot: int, count: int) -> LimitExceeded:
        return _too_many(nodes[long_nodes[slot]], pool, count, config)

    raw_counts = np.zeros(n_long, dtype=np.int64)  # an upper bound of each slot's candidates
    all_pairs = _pool_lsh_pairs(keys, groups, raw_counts, config.max_candidates, too_many)

    # history candidates: same scope, and indexed in the slot's split outside the pool
    pool_nodes = {(n.content, n.split) for n in nodes}
    pool_ids = {p.package_id for p in pool.packages}
    has_history = any(p["package_id"] not in pool_ids for p in pool.index_packages)
    hits = _history_hits(snap, keys, nodes, pool_nodes) if has_history else {}
    history: dict[int, db.ContentRow] = {}
    hist_candidates = np.zeros((0, 2), dtype=np.int64)  # (slot, history content)
    hist_row: dict[int, int] = {}
    hist_sigs = np.zeros((0, config.num_perm), dtype=np.uint16)
    hist_sizes = np.zeros(0, dtype=np.int64)
    if hits:
        hids = np.asarray(sorted(hits), dtype=np.int64)
        hist_row = {h: r for r, h in enumerate(hids.tolist())}
        hist_sigs = np.zeros((len(hids), config.num_perm), dtype=np.uint16)
        hist_sizes = np.zeros(len(hids), dtype=np.int64)
        hist_scope = np.zeros(len(hids), dtype=np.int64)
        history = snap.content_rows(hids.tolist())
        for h, row in history.items():
            r = hist_row[h]
            hist_scope[r], hist_sizes[r] = row.scope, row.shingles
            hist_sigs[r] = np.frombuffer(row.signature, dtype=np.uint16)  # type: ignore[arg-type]
        split_id: dict[str, int] = {}
        open_keys = []  # (history content, split) indexed outside the pool, as h * S + split
        for content, split in snap.content_splits(hids.tolist()):
            if (content, split) not in pool_nodes:
                open_keys.append((content, split_id.setdefault(split, len(split_id))))
        slot_split = np.asarray([split_id.get(nodes[i].split, -1) for i in long_nodes], np.int64)
        slot_scope = np.asarray([pool.content[nodes[i].content].scope for i in long_nodes],
                                np.int64)
        n_splits = max(len(split_id), 1)
        valid = np.asarray([h * n_splits + sp for h, sp in open_keys], dtype=np.int64)
        cand_h = np.repeat(hids, [len(hits[h]) for h in hids.tolist()])
        cand_slot = np.fromiter((j for h in hids.tolist() for j in sorted(hits[h])),
                                dtype=np.int64, count=len(cand_h))
        ok = (slot_scope[cand_slot] == hist_scope[np.searchsorted(hids, cand_h)]) \
            & (slot_split[cand_slot] >= 0) \
            & np.isin(cand_h * n_splits + slot_split[cand_slot], valid)
        hist_candidates = np.stack([cand_slot[ok], cand_h[ok]], axis=1)
        np.add.at(raw_counts, hist_candidates[:, 0], 1)

    # max_candidates: exact distinct counts for the slots whose upper bound exceeds it
    over = set(np.flatnonzero(raw_counts > config.max_candidates).tolist())
    if over:
        per_slot: dict[int, set[int]] = defaultdict(set)
        for a, b in all_pairs.tolist():
            if a in over:
                per_slot[a].add(b)
            if b in over:
                per_slot[b].add(a)
        for j, h in hist_candidates.tolist():
            if j in over:
                per_slot[j].add(-h)
        for j in sorted(over):
            if len(per_slot[j]) > config.max_candidates:
                raise too_many(j, len(per_slot[j]))

    # the cheap filters
    lut = np.asarray(long_nodes, dtype=np.int64)
    rows = np.asarray([hist_row[h] for h in hist_candidates[:, 1].tolist()], dtype=np.int64)
    passed = _filter_pairs(hist_candidates[:, 0], rows, sigs, sizes, hist_sigs, hist_sizes,
                           threshold, agree_min)
    history_pairs = list(zip(lut[hist_candidates[passed, 0]].tolist(),
                             hist_candidates[passed, 1].tolist()))
    if len(all_pairs):
        kept = all_pairs[_filter_pairs(all_pairs[:, 0], all_pairs[:, 1], sigs, sizes, sigs, sizes,
                                       threshold, agree_min)]
        pool_pairs = np.stack([lut[kept[:, 0]], lut[kept[:, 1]]], axis=1)
        pool_pairs.sort(axis=1)
        pool_pairs = pool_pairs[np.lexsort((pool_pairs[:, 1], pool_pairs[:, 0]))]
    else:
        pool_pairs = np.zeros((0, 2), dtype=np.int64)
    return Candidates(pool_pairs, history_pairs, history, len(all_pairs) + len(hist_candidates))


def _too_many(node: Node, pool: Pool, count: int, config: NearDedupConfig) -> LimitExceeded:
    s = node.samples[0]
    return LimitExceeded(f"{where(s.package_id, s.file, s.line)}: sample {s.sample_id} has "
                         f"{count:,} LSH candidates, over max_candidates "
                         f"{config.max_candidates:,}; no report written")


# --------------------------------------------------------------------------- stage 4: verify


@lru_cache(maxsize=2)
def _worker_texts(index_path: str) -> db.IndexTexts:
    """A verify worker's own read connection (content rows never change once written, so it
    reads the same texts as the scan's snapshot for the ids the scan knows)."""
    return db.open_texts(index_path)


def verify_pairs(source: str | db.IndexTexts, params: tuple, pairs: list[tuple[int, int]],
                 domains: dict[int, frozenset[str]] | None
                 ) -> list[tuple[int, float, str | None]]:
    """Exact Jaccard of (content, content) pairs; returns (pair index, J, blocked_by) for the
    pairs at or above the threshold. ``source`` is the scan's snapshot (inline) or, in a
    worker, the index path to read the texts from."""
    num_perm, seed, shingle_size, threshold, config_json = params
    config = NearDedupConfig.model_validate_json(config_json)
    reader = _worker_texts(source) if isinstance(source, str) else source
    hasher = MinHasher(1, seed, shingle_size)
    texts = reader.texts(sorted({c for pair in pairs for c in pair}))
    order = sorted(texts)
    sets = dict(zip(order, hasher.shingle_sets([texts[c] for c in order])))
    seqs: dict[tuple[int, int], tuple] = {}

    def sequences(guard, content):
        key = (id(guard), content)
        if key not in seqs:
            seqs[key] = guard.sequences(texts[content])
        return seqs[key]

    out = []
    for k, (a, b) in enumerate(pairs):
        j = exact_jaccard(sets[a], sets[b])
        if j >= threshold:
            doms = (domains.get(a, frozenset()) | domains.get(b, frozenset())) if domains else frozenset()
            guard = guard_for(config, doms)
            (na, ua), (nb, ub) = sequences(guard, a), sequences(guard, b)
            blocked = "numbers" if na != nb else ("units" if ua != ub else None)
            out.append((k, j, blocked))
    return out


@numba.njit(cache=True)
def _components(pairs_dense, n):
    """Union-find root of each of n items joined by the (dense) pairs."""
    parent = np.arange(n)
    for k in range(pairs_dense.shape[0]):
        a = pairs_dense[k, 0]
        b = pairs_dense[k, 1]
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        while parent[b] != b:
            parent[b] = parent[parent[b]]
            b = parent[b]
        if a != b:
            parent[max(a, b)] = min(a, b)
    for i in range(n):
        r = i
        while parent[r] != r:
            r = parent[r]
        parent[i] = r
    return parent


def _local_chunks(content_pairs: np.ndarray) -> list[np.ndarray]:
    """Pair indexes cut into work chunks that keep connected components together, so each
    worker computes a content's shingle set about once (chunks of a giant component are cut
    by size)."""
    m = len(content_pairs)
    if m == 0:
        return []
    ids, dense = np.unique(content_pairs, return_inverse=True)
    dense = dense.reshape(-1, 2)
    comp = _components(dense, len(ids))[dense[:, 0]]
    order = np.lexsort((dense[:, 1], dense[:, 0], comp))
    comp_sorted = comp[order]
    chunks = []
    start = 0
    for k in range(1, m + 1):
        size = k - start
        if k == m or (size >= VERIFY_CHUNK and comp_sorted[k] != comp_sorted[k - 1]) \
                or size >= 4 * VERIFY_CHUNK:
            chunks.append(order[start:k])
            start = k
    return chunks


def verify(snap: db.IndexSnapshot, pool: Pool, nodes: list[Node], cand: Candidates,
           config: NearDedupConfig, workers: int, progress: bool
           ) -> tuple[dict[int, list[tuple[int, float, str | None]]],
                      dict[int, list[tuple[int, float, str | None]]]]:
    """Verified relations: per later node, [(earlier node, J, blocked_by)] and
    [(history content, J, blocked_by)]."""
    jobs: list[tuple[str, int, int]] = []  # (kind, node a, node b | history content)
    for a, b in cand.pool_pairs.tolist():
        jobs.append(("pool", a, b))
    for i, h in cand.history_pairs:
        jobs.append(("hist", i, h))
    content_pairs = np.asarray([(nodes[a].content, nodes[b].content) if kind == "pool"
                                else (nodes[a].content, b) for kind, a, b in jobs],
                               dtype=np.int64).reshape(-1, 2)
    domains = None
    if config.extra_units:
        domains = defaultdict(set)
        for n in nodes:
            domains[n.content].update(s.domain for s in n.samples if s.domain)
        domains = {c: frozenset(d) for c, d in domains.items()}
    params = (config.num_perm, config.seed, config.shingle_size, config.threshold,
              config.canonical_json())
    bar = Progress("scan: verify pairs", len(jobs), enabled=progress)
    chunks = _local_chunks(content_pairs)
    path = snap.location
    args = [[tuple(p) for p in content_pairs[c].tolist()] for c in chunks]
    results: list[list[tuple[int, float, str | None]]] = []
    if workers > 1 and len(chunks) > 1:
        with process_pool(workers) as ex:
            for c, res in zip(chunks, ex.map(verify_pairs, [path] * len(args), [params] * len(args),
                                             args, [domains] * len(args))):
                results.append(res)
                bar.advance(len(c))
                pause_point("scan-verify-pool")
    else:
        for c, arg in zip(chunks, args):
            results.append(verify_pairs(snap, params, arg, domains))
            bar.advance(len(c))
    bar.finish()
    near: dict[int, list] = defaultdict(list)
    hist: dict[int, list] = defaultdict(list)
    for c, res in zip(chunks, results):
        for k, j, blocked in res:
            kind, a, b = jobs[int(c[k])]
            if kind == "pool":
                near[b].append((a, j, blocked))  # b is the later node (a < b)
            else:
                hist[a].append((b, j, blocked))
    return near, hist


# --------------------------------------------------------------------------- entry point


@dataclass
class ScanResult:
    output: Path
    counts: dict

    def summary(self) -> str:
        from near_dedup_core.report import decision_summary

        c = self.counts
        return (f"report {self.output}: {c['samples']:,} samples, {decision_summary(c)}; "
                f"{c['relations']:,} relations, "
                f"{c['history_only_relations']:,} history-only, {c['blocked_relations']:,} "
                f"blocked by the numeric/unit guard")


def scan_pool(index_path: str | Path, config: NearDedupConfig,
              package_paths: Sequence[str | Path], output_dir: str | Path, *,
              workers: int = 1, progress: bool = False) -> ScanResult:
    """Freeze the report of the pool ``package_paths`` into ``output_dir`` (see module doc)."""
    output = Path(output_dir)
    if db.postgres_url(index_path) is None:
        index_path = Path(index_path)
    paths = [Path(p) for p in package_paths]
    require_new_output(output)
    for p in paths:
        if is_within(output, p):
            raise NearDedupError(f"output {output} is inside input package {p}; packages are "
                                 f"immutable")
    pkgs = open_packages(paths)
    total = sum(p.record_count for p in pkgs)
    if total > config.max_pool_records:
        raise LimitExceeded(f"input pool has {total:,} records, over max_pool_records "
                            f"{config.max_pool_records:,}")
    try:
        return _scan(index_path, config, pkgs, output, workers, progress)
    except (LookupError, ValueError, TypeError, AttributeError) as exc:
        if isinstance(index_path, Path):
            db.raise_if_damaged(index_path, exc)
        raise


def _scan(index_path: Path | str, config: NearDedupConfig, pkgs: list[Package], output: Path,
          workers: int, progress: bool) -> ScanResult:
    from near_dedup_core.report import decide, write_report

    with db.database_errors(index_path), db.open_snapshot(index_path, config) as snap:
        pool = load_pool(snap, snap.path, pkgs)
        _verify_files(pkgs)
        nodes = build_nodes(pool)
        cand = find_candidates(snap, pool, nodes, config, progress)
        pause_point("scan-verify")
        near, hist = verify(snap, pool, nodes, cand, config, workers, progress)
        decisions = decide(pool, nodes, near, hist, config)
        counts = write_report(output, snap, pool, nodes, decisions, near, hist, cand, config)
    return ScanResult(output, counts)
