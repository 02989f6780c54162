"""`index find`: every indexed content that is a query's text or a near copy of it, with
every source it was ingested from, read from ONE snapshot of the index.

For each query:

1. **text** — its compared text normalized as `index` normalizes it (a hash query's text is
   the indexed content's, already normalized), its MinHash signature, shingle-set size and
   LSH band keys as `index` computes them, in batches shared by this process and the
   executor (`history.sign`); a text whose raw form the snapshot holds (its sha256 among the
   sources) is the indexed content's, read as a scan reads its pool;
2. **scopes** — where it is looked up: a CPT text in every CPT scope (tokenizer) of the index,
   an SFT text in its own scope (task, system, material, images), as a scan compares it;
   a hash query in the scopes of the contents it names (every CPT scope if one is CPT);
3. **same text** — its content id in each of those scopes, looked up in the index;
4. **near copies** — for a text of at least ``min_chars``, the indexed contents sharing a
   band key with it (`scan.candidates.band_key_hits`: the scan's history lookup, per bucket
   on the executor on Iceberg), of one of its scopes, through the scan's two filters
   (`scan.candidates.filter_pairs`), then verified by exact Jaccard on the executor
   (`history.verify`); those at or above the index's threshold are near copies, with the
   numeric/unit guard's verdict shown (``blocked_by``), not applied;
5. **sources** — every sample each match was ingested from: package, sample id, split, the
   batch and its date; with mixtures, which of them contained that sample
   (`history.mixtures`).

The parameters are the index's own (its ``config`` meta row). The result is ordered (queries
as given; per query the same text first, then by Jaccard, descending, then content id;
sources by batch, package, sample, split), so it is the same on every backend and executor.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict, deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Executor, Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import orjson

from near_dedup_core import index_store as db
from near_dedup_core.compare import scope_hash, text_sha256
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.history.queries import Query
from near_dedup_core.history.sign import SignedTexts, sign_texts
from near_dedup_core.history.verify import WORKER_MODULES, PairResult, verify_queries
from near_dedup_core.params import WorkerParams
from near_dedup_core.progress import Progress
from near_dedup_core.scan.candidates import band_key_hits, filter_pairs, min_agreement
from near_dedup_core.scan.verify import component_chunks, costliest_first
from near_dedup_core.signature import band_keys
from near_dedup_core.wording import count
from near_dedup_core.workers import POOL_RECORDS, Executors, choose_executor

if TYPE_CHECKING:  # the mixtures' formats are read only when `--mixtures` is given
    from near_dedup_core.history.mixtures import ShippedMixtures

#: query texts per signing chunk: small enough that the main process, which shares the
#: chunks with the workers, finishes its last one soon after theirs, and does not build the
#: normalization table for one (`normalize.TABLE_MIN_CHARS` of non-ASCII text)
SIGN_CHUNK = 256

#: What `index find` does after each of its stages, as its progress shows it.
STAGES = ("queries signed; looking up the same texts", "looking up band keys",
          "verifying near copies", "reading the sources", "checking the index's pages")


@dataclass
class FindResult:
    """One JSON object per query (docs/provenance.md), in query order."""

    answers: list[dict] = field(default_factory=list)

    def json_lines(self) -> str:
        return "".join(orjson.dumps(a).decode() + "\n" for a in self.answers)

    def table(self) -> str:
        lines = []
        for a in self.answers:
            q = a["query"]
            what = ", ".join(x for x in (q["from"], q["kind"]) if x)
            chars = "" if q["normalized_chars"] is None else \
                f", {q['normalized_chars']:,} normalized characters"
            head = f"query {q['id']} ({what}{chars}): "
            if q["kind"] is None:
                lines.append(head + "not in the index")
                continue
            lines.append(head + (count(len(a["matches"]), "match") if a["matches"]
                                 else "no match"))
            for m in a["matches"]:
                guard = "" if m["blocked_by"] is None else \
                    f", the guard keeps it apart ({m['blocked_by']} differ)"
                lines.append(f"  {m['kind']:<5} J={m['jaccard']:.4f}  content {m['content_id']}"
                             f"  {m['scope']}{guard}")
                for s in m["sources"]:
                    mixtures = "" if s["mixtures"] is None else \
                        "  in mixtures: " + (", ".join(s["mixtures"]) or "none")
                    lines.append(f"      {s['package_id']} {s['sample_id']} ({s['split']}), "
                                 f"batch {s['batch']} of {s['batch_date']}{mixtures}")
        return "\n".join(lines)


class _Signed:
    """The queries' normalized texts as UTF-8 (``present``: False for a hash the index does
    not hold), their lengths in code points and, for those of at least ``min_chars``
    (``long``), their signatures (stored values), shingle-set sizes and band keys (``keys``,
    one row per text of ``long``), as `index` computes them (`history.sign`), `SIGN_CHUNK`
    texts at a time. A query whose raw text the index holds has its content's row id and
    scope (``content``, ``scope``; -1 for the others) and its text only where it is needed
    (`read_texts`): a verify task reads it from the index, as it reads the contents'.

    On a local pool the main process and the workers share the chunks: a thread per worker
    hands chunks from the end of the list to the pool, while the main process, once it has
    read what it needs of the index, signs chunks from its start (`finish`). The pool's
    workers start only once their forkserver has loaded the kernels; meanwhile the main
    process is not idle. On Ray every chunk is a task; inline the main process signs them
    all."""

    def __init__(self, n: int, config: NearDedupConfig) -> None:
        self.config = config
        self.params = WorkerParams.of(config)
        self.present = np.zeros(n, dtype=bool)
        self.utf8: list[bytes] = [b""] * n
        self.chars = np.zeros(n, dtype=np.int64)
        self.content = np.full(n, -1, dtype=np.int64)
        self.scope = np.full(n, -1, dtype=np.int64)
        self.sigs = np.zeros((n, config.num_perm), dtype=np.uint16)
        self.sizes = np.zeros(n, dtype=np.int64)
        self._keys = np.zeros((n, config.bands), dtype=np.int64)
        self.long = np.zeros(0, dtype=np.int64)
        self.keys = np.zeros((0, config.bands), dtype=np.int64)
        self._chunks: deque[tuple[list[int], list[str]]] = deque()
        self._lock = threading.Lock()
        self._pending: list[tuple[list[int], Future]] = []
        self._feeders: list[threading.Thread] = []
        self._failed: list[BaseException] = []

    def start(self, ex: Executor, running: Executors, rows: list[int], texts: list[str]
              ) -> None:
        """Begin signing ``texts`` (those of the queries ``rows``, to be normalized)."""
        self._chunks.extend((rows[k:k + SIGN_CHUNK], texts[k:k + SIGN_CHUNK])
                            for k in range(0, len(rows), SIGN_CHUNK))
        if running.in_process:
            return
        if not running.shares_memory:
            while self._chunks:
                part, some = self._chunks.popleft()
                self._pending.append((part, ex.submit(sign_texts, self.params, some, False)))
            return
        for _ in range(running.workers):
            feeder = threading.Thread(target=self._feed, args=(ex,), daemon=True,
                                      name="near-dedup-find-sign")
            feeder.start()
            self._feeders.append(feeder)

    def _take(self, first: bool) -> tuple[list[int], list[str]] | None:
        with self._lock:
            if not self._chunks:
                return None
            return self._chunks.popleft() if first else self._chunks.pop()

    def _feed(self, ex: Executor) -> None:
        try:
            while (job := self._take(first=False)) is not None:
                self._put(job[0], ex.submit(sign_texts, self.params, job[1], False).result())
        except BaseException as exc:  # noqa: BLE001 (raised by `finish`)
            self._failed.append(exc)

    def _put(self, rows: list[int], part: SignedTexts) -> None:
        for r, utf8 in zip(rows, part.utf8, strict=True):
            self.utf8[r] = utf8
        self.present[rows] = True
        self.chars[rows] = part.chars
        self.sigs[rows] = part.sigs
        self.sizes[rows] = part.sizes
        self._keys[rows] = part.keys

    def put_indexed(self, snap: db.Snapshot, known: dict[int, int]) -> db.ContentColumns | None:
        """The queries of ``known`` (query number -> the content its raw text was indexed
        as, `_indexed`) as the index holds them: their contents, scopes, text lengths,
        signatures and shingle-set sizes read, as a scan reads its pool's, not computed; not
        their texts (`read_texts`). The columns read, or None."""
        if not known:
            return None
        ids = sorted(set(known.values()))
        columns = snap.content_columns(np.asarray(ids, dtype=np.int64))
        at = {c: k for k, c in enumerate(columns.rowid.tolist())}
        rows = list(known)
        k = np.asarray([at[known[n]] for n in rows], dtype=np.int64)
        signed = columns.has_signature[k]
        sigs = np.zeros((len(rows), self.config.num_perm), dtype=np.uint16)
        sigs[signed] = columns.signatures[k[signed]]
        self.present[rows] = True
        self.content[rows] = columns.rowid[k]
        self.scope[rows] = columns.scope[k]
        self.chars[rows] = columns.norm_chars[k]
        self.sigs[rows] = sigs
        self.sizes[rows] = np.where(signed, columns.shingles[k], 0)
        self._keys[rows] = band_keys(sigs, self.config.bands, self.config.rows)
        return columns

    def read_texts(self, snap: db.Snapshot, rows: list[int]) -> None:
        """The normalized texts of the queries ``rows`` that `put_indexed` left unread."""
        rows = [n for n in rows if self.content[n] >= 0 and not self.utf8[n]]
        if not rows:
            return
        texts = snap.texts(sorted({int(self.content[n]) for n in rows}))
        for n in rows:
            self.utf8[n] = texts[int(self.content[n])].encode()

    def task_query(self, n: int) -> bytes | int:
        """What a verify task is given of query ``n``: its content's row id, whose text
        the task reads, or its normalized text (`history.verify.verify_queries`)."""
        c = int(self.content[n])
        return c if c >= 0 else self.utf8[n]

    def finish(self, rows: list[int], texts: list[str]) -> _Signed:
        """Sign the chunks left, and ``texts`` (those of the queries ``rows``, normalized
        already) here; every result in place, ``long`` and ``keys`` set."""
        while (job := self._take(first=True)) is not None:
            self._put(job[0], sign_texts(self.params, job[1], False))
        if rows:
            self._put(rows, sign_texts(self.params, texts, True))
        for feeder in self._feeders:
            feeder.join()
        if self._failed:
            raise self._failed[0]
        for part, future in self._pending:
            self._put(part, future.result())
        self.long = np.flatnonzero((self.chars >= self.config.min_chars) & self.present)
        self.keys = self._keys[self.long]
        return self


def index_config(snap: db.Snapshot) -> NearDedupConfig:
    """The parameters the index is bound to (its ``config`` meta row)."""
    return NearDedupConfig.model_validate(orjson.loads(snap.meta()["config"]))


def find_texts(index: str | Path | db.Index, queries: Sequence[Query], *, workers: int = 1,
               executor: str | Executors = "local", mixtures: ShippedMixtures | None = None,
               progress: bool = False) -> FindResult:
    """The answer to each query (module doc) from one snapshot of ``index``."""
    chosen = choose_executor(executor, workers)
    index = db.open_index(index)
    try:
        with index.errors(), index.snapshot() as snap, \
                _pool(chosen, len(queries), index) as (ex, running):
            if not running.in_process:  # a per-bucket history join's tasks run there
                snap.join_executor = ex
            return _find(index, snap, list(queries), ex, running, mixtures, progress)
    except (LookupError, ValueError, TypeError, AttributeError) as exc:
        index.raise_if_damaged(exc)
        raise


@contextmanager
def _pool(executor: Executors, queries: int, index: db.Index
          ) -> Iterator[tuple[Executor, Executors]]:
    running = executor.for_work(queries, POOL_RECORDS)
    preload = (*index.worker_modules, *WORKER_MODULES) if running.workers_read_index else ()
    with running.start(preload=preload) as ex:
        yield ex, running


def _scope_sets(queries: list[Query], resolved: dict[int, list[int]],
                scope_keys: dict[int, str], content_scope: dict[int, int]) -> list[list[int]]:
    """Each query's scope row ids (module doc, step 2)."""
    cpt = sorted(i for i, key in scope_keys.items() if json.loads(key)[0] == "cpt")
    by_key = {key: i for i, key in scope_keys.items()}
    out = []
    for n, q in enumerate(queries):
        if q.hash is not None:
            scopes = {content_scope[c] for c in resolved.get(n, [])}
            if any(s in cpt for s in scopes):
                scopes.update(cpt)
            out.append(sorted(scopes))
        elif q.kind == "cpt":
            out.append(cpt)
        else:
            out.append([by_key[q.scope_key]] if q.scope_key in by_key else [])
    return out


def _resolve_hashes(index: db.Index, snap: db.Snapshot, queries: list[Query]
                    ) -> dict[int, list[int]]:
    """Query number -> the content row ids its hash names in the snapshot: a content id, or
    a raw text's sha256 held by one of the snapshot's sources (the raw-text lookup may see a
    later batch; its sources may not)."""
    ids = {n: q.hash for n, q in enumerate(queries) if q.hash is not None and len(q.hash) == 16}
    shas = {n: q.hash for n, q in enumerate(queries) if q.hash is not None and len(q.hash) == 32}
    out: dict[int, list[int]] = {}
    if ids:
        rows = snap.content_rows(list(ids.values()))
        for n, cid in ids.items():
            if cid in rows:
                out[n] = [rows[cid]]
    if shas:
        lookup = index.known_texts()
        try:
            found = lookup.contents(sorted(set(shas.values())))
        finally:
            lookup.close()
        candidates = sorted(set(found.values()))
        held = {(s.text_sha256, s.content) for s in snap.content_sources(candidates)}
        for n, sha in shas.items():
            contents = sorted({c for (h, _), c in found.items() if h == sha and (sha, c) in held})
            if contents:
                out[n] = contents
    return out


def _indexed(index: db.Index, snap: db.Snapshot, queries: list[Query], rows: list[int]
             ) -> tuple[dict[int, int], list[db.ContentSource]]:
    """Query number -> a content that the snapshot holds under the query's raw text (its
    ``text_sha256`` among the snapshot's sources of that content), for the queries ``rows``;
    and every source of those contents. Such a query's text and signature are the content's:
    `index` does not normalize or sign a raw text it has indexed either."""
    if not rows:
        return {}, []
    shas = {n: text_sha256(queries[n].text or "") for n in rows}
    lookup = index.known_texts()
    try:
        found = lookup.contents(sorted(set(shas.values())))
    finally:
        lookup.close()
    if not found:
        return {}, []
    sources = snap.content_sources(sorted(set(found.values())))
    held = {(s.text_sha256, s.content) for s in sources}
    best: dict[bytes, int] = {}
    for (sha, _), c in found.items():
        if (sha, c) in held and c < best.get(sha, c + 1):
            best[sha] = c
    return {n: best[sha] for n, sha in shas.items() if sha in best}, sources


def _exact(snap: db.Snapshot, signed: _Signed, scopes: list[list[int]],
           scope_keys: dict[int, str]) -> dict[int, set[int]]:
    """Query number -> the contents that are its text (its content id in one of its
    scopes): in its own content's scope, an indexed query's is that content; the others
    are looked up by the content id of its text."""
    out: dict[int, set[int]] = defaultdict(set)
    other = [[s for s in ss if s != signed.scope[n]] if signed.present[n] else []
             for n, ss in enumerate(scopes)]
    signed.read_texts(snap, [n for n, ss in enumerate(other) if ss])
    hashes = {s: scope_hash(scope_keys[s]) for s in {s for ss in other for s in ss}}
    wanted: dict[bytes, list[int]] = defaultdict(list)
    for n, ss in enumerate(other):
        if signed.content[n] >= 0 and len(ss) < len(scopes[n]):
            out[n].add(int(signed.content[n]))
        for s in ss:
            h = hashes[s].copy()
            h.update(signed.utf8[n])
            wanted[h.digest()[:16]].append(n)
    rows = snap.content_rows(list(wanted))
    for cid, row in rows.items():
        for n in wanted[cid]:
            out[n].add(row)
    return out


def _candidates(snap: db.Snapshot, signed: _Signed, scopes: list[list[int]],
                exact: dict[int, set[int]], config: NearDedupConfig
                ) -> tuple[np.ndarray, db.ContentColumns | None]:
    """(query number, content row id) pairs sharing a band key, in one of the query's scopes,
    through the scan's filters, the same texts left out; sorted. And the columns of the
    contents that share one (None: none does)."""
    hits = band_key_hits(snap, signed.keys, [], set())
    if not len(hits):
        return np.zeros((0, 2), dtype=np.int64), None
    contents = snap.content_columns(np.unique(hits[:, 0]))
    rows = np.searchsorted(contents.rowid, hits[:, 0])
    queries = signed.long[hits[:, 1]]
    width = int(contents.scope.max()) + 1
    allowed = np.zeros((len(scopes), width), dtype=bool)
    for n, ss in enumerate(scopes):
        allowed[n, [s for s in ss if s < width]] = True
    in_scope = allowed[queries, contents.scope[rows]]
    span = int(hits[:, 0].max()) + 1
    same = np.asarray([n * span + c for n, cs in exact.items() for c in cs if c < span],
                      dtype=np.int64)
    not_exact = ~np.isin(queries * span + hits[:, 0], same)
    passed = filter_pairs(queries, rows, signed.sigs, signed.sizes, contents.signatures,
                          contents.shingles, config.threshold,
                          min_agreement(config.num_perm, config.threshold))
    keep = in_scope & not_exact & passed & contents.has_signature[rows]
    pairs = np.stack([queries[keep], hits[keep, 0]], axis=1)
    return pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))], contents


def _verify(snap: db.Snapshot, pairs: np.ndarray, signed: _Signed, queries: list[Query],
            domains: dict[int, frozenset[str]] | None, config: NearDedupConfig, ex: Executor,
            running: Executors) -> dict[tuple[int, int], PairResult]:
    """(query number, content) -> the verified pairs at or above the threshold. The pairs
    go to the tasks in the scan's chunks (`scan.verify.component_chunks`, costliest first),
    each query a node of its own: a connected component of the pairs is kept whole (up to
    the chunk's limit), so that a task reads, hashes and reads the guard's sequences of
    each content's text, and each query's, about once however many pairs it is in."""
    params = WorkerParams.of(config)
    futures: list[tuple[np.ndarray, Future]] = []
    span = int(pairs[:, 1].max()) + 1 if len(pairs) else 0
    nodes = np.stack([pairs[:, 0] + span, pairs[:, 1]], axis=1)
    # a content's size is not at hand: its query's stands for it (as in the scan's history)
    sizes = np.repeat(np.maximum(signed.sizes[pairs[:, 0]], 1), 2).reshape(-1, 2)
    for part in costliest_first(component_chunks(nodes, running.workers), nodes, sizes):
        chunk = pairs[part]
        local, dense = np.unique(chunk[:, 0], return_inverse=True)
        args = np.stack([dense.reshape(-1), chunk[:, 1]], axis=1)
        given = [signed.task_query(i) for i in local.tolist()]
        source: str | db.TextReader | db.ShippedTexts
        if running.in_process:
            source = snap
        elif running.workers_read_index:
            source = snap.location
        else:
            source = snap.shipped(sorted({*chunk[:, 1].tolist(),
                                          *(q for q in given if isinstance(q, int))}))
        doms = None if domains is None else [
            domains.get(int(c), frozenset()) | frozenset(
                [d] if (d := queries[int(q)].domain) else [])
            for q, c in chunk.tolist()]
        futures.append((chunk, ex.submit(verify_queries, source, params, given, args, doms)))
    out = {}
    for chunk, future in futures:
        for r in future.result():
            q, c = chunk[r.k].tolist()
            out[(q, c)] = r
    return out


def _find(index: db.Index, snap: db.Snapshot, queries: list[Query], ex: Executor,
          running: Executors, mixtures: ShippedMixtures | None, progress: bool) -> FindResult:
    config = index_config(snap)
    stages = Progress("index find", len(STAGES), enabled=progress)
    signed = _Signed(len(queries), config)
    given = [n for n, q in enumerate(queries) if q.text is not None]
    known, known_sources = _indexed(index, snap, queries, given)
    unknown = [n for n in given if n not in known]
    signed.start(ex, running, unknown, [queries[n].text or "" for n in unknown])
    read = [signed.put_indexed(snap, known)]  # content columns, for the answers
    sources_of: dict[int, list[db.ContentSource]] = defaultdict(list)
    for s in known_sources:  # every source of those contents: read once
        sources_of[s.content].append(s)
    scope_keys = snap.scope_keys()
    resolved = _resolve_hashes(index, snap, queries)
    named = sorted({c for cs in resolved.values() for c in cs})
    named_columns = snap.content_columns(np.asarray(named, dtype=np.int64))
    content_scope = dict(zip(named_columns.rowid.tolist(), named_columns.scope.tolist(),
                             strict=True))
    named_texts = snap.texts(named) if named else {}
    held = [n for n, q in enumerate(queries) if q.hash is not None and n in resolved]
    signed.finish(held, [named_texts[resolved[n][0]] for n in held])
    scopes = _scope_sets(queries, resolved, scope_keys, content_scope)
    stages.step(STAGES[0])
    exact = _exact(snap, signed, scopes, scope_keys)
    for n, cs in resolved.items():  # a hash names its contents: they are its text
        exact.setdefault(n, set()).update(cs)
    stages.step(STAGES[1])
    pairs, hit_columns = _candidates(snap, signed, scopes, exact, config)
    read += [named_columns, hit_columns]
    stages.step(STAGES[2])
    domains: dict[int, frozenset[str]] | None = None
    if config.extra_units and len(pairs):
        unread = [c for c in np.unique(pairs[:, 1]).tolist() if c not in sources_of]
        for s in snap.content_sources(unread):
            sources_of[s.content].append(s)
        domains = {c: frozenset(s.domain for s in ss if s.domain)
                   for c, ss in sources_of.items()}
    verified = _verify(snap, pairs, signed, queries, domains, config, ex, running)
    stages.step(STAGES[3])
    matched = sorted({c for cs in exact.values() for c in cs} | {c for _, c in verified})
    todo = [c for c in matched if c not in sources_of]
    for s in snap.content_sources(todo):
        sources_of[s.content].append(s)
    shown = _shown(snap, matched, [r for r in read if r is not None])
    answers = _answers(snap, queries, signed, scopes, scope_keys, exact, verified, shown,
                       sources_of, mixtures)
    stages.step(STAGES[4])
    snap.verify_pages()  # nothing is printed from a damaged index
    stages.finish()
    return FindResult(answers)


def _shown(snap: db.Snapshot, ids: list[int], read: list[db.ContentColumns]
           ) -> dict[int, tuple[str, str, int]]:
    """Content row id -> what an answer shows of it (content id in hex, scope label, first
    batch), for the contents ``ids``: from the columns ``read`` already where they hold it
    (the queries' own contents, those sharing a band key with one), the others read."""
    labels = snap.scope_labels()
    out: dict[int, tuple[str, str, int]] = {}
    todo = np.asarray(ids, dtype=np.int64)
    for columns in read:
        if not len(todo) or not len(columns.rowid):
            continue
        at = np.searchsorted(columns.rowid, todo).clip(max=len(columns.rowid) - 1)
        here = columns.rowid[at] == todo
        _show(out, columns, todo[here], at[here], labels)
        todo = todo[~here]
    if len(todo):
        columns = snap.content_columns(todo)
        _show(out, columns, columns.rowid, np.arange(len(columns.rowid)), labels)
    return out


def _show(out: dict[int, tuple[str, str, int]], columns: db.ContentColumns, ids: np.ndarray,
          at: np.ndarray, labels: dict[int, str]) -> None:
    for c, k, scope, batch in zip(ids.tolist(), at.tolist(), columns.scope[at].tolist(),
                                  columns.batch[at].tolist(), strict=True):
        out[c] = (columns.content_id[k].hex(), labels[scope], batch)


#: the order of a match's sources
_SOURCE_ORDER = itemgetter("batch", "package_id", "sample_id", "split")


def _answers(snap: db.Snapshot, queries: list[Query], signed: _Signed,
             scopes: list[list[int]], scope_keys: dict[int, str], exact: dict[int, set[int]],
             verified: dict[tuple[int, int], PairResult], shown: dict[int, tuple[str, str, int]],
             sources_of: dict[int, list[db.ContentSource]],
             mixtures: ShippedMixtures | None) -> list[dict]:
    """One answer per query (the module doc's order): its same texts first, then its near
    copies by Jaccard, descending, then content id; each match's sources by batch, package,
    sample, split."""
    packages = {p.rowid: p for p in snap.indexed_packages()}
    dates = snap.batch_dates()
    near: dict[int, list[tuple[int, float, str | None, str]]] = defaultdict(list)
    for (qn, c), r in verified.items():
        near[qn].append((c, r.jaccard, r.blocked_by, "near"))
    chars = signed.chars.tolist()
    present = signed.present.tolist()
    answers = []
    for n, q in enumerate(queries):
        found: list[tuple[int, float, str | None, str]] = [
            (c, 1.0, None, "exact") for c in exact.get(n, ())]
        found += near.get(n, [])
        matches: list[tuple[tuple[bool, float, str], dict]] = []
        for c, jac, blocked, kind in found:
            cid, label, first = shown[c]
            srcs = []
            for s in sources_of[c]:
                p = packages[s.package]
                srcs.append({"package_id": p.package_id, "sample_id": s.sample_id,
                             "split": s.split, "batch": p.batch, "batch_date": dates[p.batch],
                             "mixtures": None if mixtures is None else
                             mixtures.containing(p.package_id, p.manifest_sha256,
                                                 s.sample_id)})
            srcs.sort(key=_SOURCE_ORDER)
            matches.append(((kind != "exact", -jac, cid),
                            {"content_id": cid, "scope": label, "kind": kind, "jaccard": jac,
                             "blocked_by": blocked, "first_batch": first, "sources": srcs}))
        matches.sort(key=itemgetter(0))
        answers.append({"query": {"id": q.id, "from": q.source,
                                  "kind": _kind(q, scopes[n], scope_keys, present[n]),
                                  "normalized_chars": chars[n] if present[n] else None},
                        "matches": [m[1] for m in matches]})
    return answers


def _kind(q: Query, scopes: list[int], scope_keys: dict[int, str],
          present: bool) -> str | None:
    """A query's kind; a hash query's is its contents' (None: not in the index)."""
    if q.hash is None:
        return q.kind
    if not present:
        return None
    return str(json.loads(scope_keys[scopes[0]])[0]) if scopes else None


