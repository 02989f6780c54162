"""The report files of a scan: decisions, relations (each verified pair once, from the later
sample's side), origins, manifest and checksums, written into the staging folder that
`near_dedup_core.fsutil.atomic_dir` renames into place. The format itself is defined by the
models of `near_dedup_core.formats.report` (files, fields) and `near_dedup_core.report`
(reasons, counts); the bytes written here parse into those models and dump back to the same
bytes (`tests/test_report_verify.py::test_written_files_round_trip_through_their_models`).

Rows are rendered and written a buffer at a time (never a list of a million dicts), each
file hashed as it is written: ``relations.jsonl`` in the main process, and beside it, in a
thread, ``decisions.jsonl`` by a compiled kernel that holds no GIL (`render_decisions`);
that thread is started, and the kernel loaded, at the start of the scan (`reserve`).
``origins.jsonl`` and the samples' text digests depend on nothing but the input packages,
so `write_origins` and `text_digests` run in a worker from the start of the scan, reading
the packages' sources on a connection of its own.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import orjson

from near_dedup_core import ALGORITHM_VERSION, __version__
from near_dedup_core import index_store as db
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.formats.report import (
    FORMAT,
    FORMAT_VERSION,
    AppliedTakedown,
    CandidateCounts,
    IndexState,
    IndexStatePackage,
    ReportCounts,
    ReportFiles,
    ReportInput,
    ReportManifest,
)
from near_dedup_core.fsutil import json_line, write_checksums, write_json, write_lines
from near_dedup_core.jit import numba
from near_dedup_core.report import Tally
from near_dedup_core.scan.records import (
    BLOCKED_BY,
    NEAR_DUPLICATE,
    REASONS,
    RETAINED_SPLIT,
    TAKEDOWN,
    ByteStrings,
    Candidates,
    Decisions,
    Matches,
    Nodes,
    Pool,
    ReportColumns,
)
from near_dedup_core.takedown.match import NodeTakedowns, TakedownHits, applied

if TYPE_CHECKING:
    from concurrent.futures import Executor


@contextmanager
def _reader(source: str | db.TextReader) -> Iterator[db.TextReader]:
    """``source`` itself (the scan's snapshot), or a connection of its own to the index at
    that location, closed afterwards (a package's sources never change once committed, so
    it reads the same rows)."""
    if not isinstance(source, str):
        yield source
        return
    reader = db.open_texts(source)
    try:
        yield reader
    finally:
        reader.close()


def write_origins(source: str | db.TextReader, package_rowids: list[int],
                  package_ids: list[str], path: Path) -> tuple[int, str]:
    """``origins.jsonl``: every sample of the input packages in report order (input order,
    then package order) with its file, line and original ``source`` object; returns (lines,
    sha256). ``source`` is the scan's snapshot or the index location (`_reader`)."""
    with _reader(source) as reader:
        return write_lines(path, _checked(
            json_line({"package_id": package_id, "sample_id": sample_id, "split": split,
                       "file": file, "line": line,
                       "source": orjson.loads(src) if src is not None else None})
            for rowid, package_id in zip(package_rowids, package_ids, strict=True)
            for sample_id, split, file, line, src in reader.package_origins(rowid)))


#: (content row id, split) -> that content's sources in the split outside the pool, sorted.
OutsideSources = dict[tuple[int, str], list[dict]]


def pool_outside_sources(snap: db.Snapshot, pool: Pool, nodes: Nodes) -> OutsideSources:
    """`_outside_sources` of the pool's own contents: they need nothing from the verification,
    so the scan reads them while the workers verify, not in the report's serial tail (the
    history matches' are read there, `_relation_lines`)."""
    return _outside_sources(snap, pool, pool.contents.rowid[nodes.content])


def _outside_sources(snap: db.Snapshot, pool: Pool,
                     contents: np.ndarray) -> OutsideSources:
    """(content row id, split) -> sources outside the pool, sorted, for the ``contents``
    (row ids); nothing when the index holds no package outside the pool."""
    found: dict[tuple[int, str], list[dict]] = defaultdict(list)
    if not pool.has_history():
        return found
    pool_ids = {p.package_id for p in pool.packages}
    for r in snap.outside_sources(np.unique(contents).tolist(), pool_ids):
        found[(r.content, r.split)].append({"package_id": r.package_id,
                                            "sample_id": r.sample_id, "split": r.split})
    for rows in found.values():
        rows.sort(key=lambda r: (r["package_id"], r["sample_id"]))
    return found


_dumps = orjson.dumps
_NULL = b"null"

#: Address space (bytes) that must be free before orjson renders a block of the report.
#: orjson does not check its own allocations: an output buffer it cannot grow is a
#: segmentation fault (orjson 3.13 under ``ulimit -v``), not a MemoryError. So the scan asks
#: for the room first (`headroom`), where running out is numpy's MemoryError, the one-line
#: ``out of memory`` error.
HEADROOM = 8 << 20
#: Report lines rendered between two `headroom` checks.
HEADROOM_LINES = 4096


def headroom(nbytes: int = 0) -> None:
    """Map ``nbytes`` (at least `HEADROOM`) and let go of them at once (never touched, so
    never paid for): a MemoryError now if they are not there."""
    np.empty(max(nbytes, HEADROOM), dtype=np.uint8)


def _checked(lines: Iterable[bytes]) -> Iterator[bytes]:
    """``lines``, with a `headroom` check before each block of `HEADROOM_LINES`."""
    for k, line in enumerate(lines):
        if k % HEADROOM_LINES == 0:
            headroom()
        yield line


def _float_json(values: np.ndarray) -> list[bytes]:
    """Each float's JSON as ``orjson.dumps`` renders it, from one call for all of them (a
    number's JSON holds no comma), once twice its length is free (`headroom`)."""
    if not len(values):
        return []
    headroom(2 * 32 * len(values))  # a float's JSON takes at most 24 bytes and a comma
    return _dumps(values.tolist())[1:-1].split(b",")


#: Bytes of ``decisions.jsonl`` rendered per write (at least two of its longest lines).
DECISIONS_BUFFER = 1 << 25


class _Render:
    """Canonical JSON lines (`near_dedup_core.fsutil.json_line`: sorted keys, compact) of
    relation rows, assembled from pieces: every value goes through ``orjson.dumps`` as it
    would inside the row's dict, and the keys are written in sorted order, so the bytes are
    those of ``json_line(row)`` at a fraction of the cost (no dict per row; repeated values
    such as package ids rendered once). Decision rows are built the same way, by a kernel
    (`render_decisions`)."""

    def __init__(self, pool: Pool, history: db.ContentColumns) -> None:
        self.package = [_dumps(p.package_id) for p in pool.packages]
        self.input_pos = pool.samples.input_pos.tolist()
        self.sample_id = pool.samples.sample_id
        self.history = history
        self.blocked = [_NULL if b is None else _dumps(b) for b in BLOCKED_BY]

    def ref(self, sample: int) -> bytes:
        """``{"package_id": …, "sample_id": …}`` of a pool sample."""
        return b"".join((b'{"package_id":', self.package[self.input_pos[sample]],
                         b',"sample_id":', _dumps(self.sample_id[sample]), b"}"))

    def match(self, content_hex: str, sample: int | None) -> bytes:
        """``{"content_id": …, "package_id": …, "sample_id": …}``; no sample for history."""
        if sample is None:
            return b'{"content_id":"' + content_hex.encode() + \
                b'","package_id":null,"sample_id":null}'
        return b"".join((b'{"content_id":"', content_hex.encode(), b'","package_id":',
                         self.package[self.input_pos[sample]], b',"sample_id":',
                         _dumps(self.sample_id[sample]), b"}"))

    def history_hex(self, rowid: int) -> str:
        h = self.history
        return h.content_id[int(np.searchsorted(h.rowid, rowid))].hex()


def text_digests(source: str | db.TextReader, package_rowids: list[int]) -> ByteStrings:
    """Each sample's ``text_sha256`` in report order (input order, then package order), read
    from ``source``, the scan's snapshot or the index location (`_reader`)."""
    with _reader(source) as reader:
        return ByteStrings.of([sha for rowid in package_rowids
                               for sha in reader.package_column(rowid, "text_sha256")])


def _sample_id_json(ids: list[str]) -> ByteStrings:
    """Each sample id's JSON string, as ``orjson.dumps`` renders it. ``orjson`` escapes only
    ``"``, ``\\`` and characters below U+0020 (everything else is its UTF-8), so for ids
    without those (almost all) the JSON is the id's UTF-8 in quotes: one join and one
    encoding for all ids, the ids' bounds found at the NUL bytes that join them, instead of
    a call per id."""
    joined = "\x00".join(ids).encode()
    raw = np.frombuffer(joined, dtype=np.uint8)
    nul = np.flatnonzero(raw == 0)
    if len(nul) != max(0, len(ids) - 1) or \
            np.any((raw < 0x20) & (raw != 0)) or b'"' in joined or b"\\" in joined:
        headroom()
        return ByteStrings.of([_dumps(x) for x in ids])
    start = np.zeros(len(ids) + 1, dtype=np.int64)
    if ids:  # id k's text starts at nul[k - 1] + 1; each NUL before it became two quotes
        start[1:-1] = nul + 1 + np.arange(1, len(ids), dtype=np.int64)
        start[-1] = len(raw) + len(ids) + 1
    quoted = b'"' + joined.replace(b"\x00", b'""') + b'"' if ids else b""
    return ByteStrings(np.frombuffer(quoted, dtype=np.uint8), start)


def report_columns(pool: Pool, text_sha256: ByteStrings) -> ReportColumns:
    """The samples' ids as JSON (`_sample_id_json`) and the contents' ids as `ByteStrings`,
    beside the samples' text digests (`text_digests`): the scan prepares them while the
    workers verify."""
    ids = pool.samples.sample_id
    if len(text_sha256.start) != len(ids) + 1:
        raise ValueError(f"{len(text_sha256.start) - 1} text digests for {len(ids)} samples")
    return ReportColumns(sample_id_json=_sample_id_json(ids),
                         content_id=ByteStrings.of(pool.contents.content_id),
                         text_sha256=text_sha256)


#: The fixed pieces of a decision line, first in `_DecisionLines.pieces` (ids below); then
#: per outcome the JSON between content_id and package_id, then per outcome the JSON between
#: package_id and sample_id, then the JSON of the packages' ids, splits, scopes and the near
#: duplicates' Jaccards.
_PIECES = (b'{"content_id":"', b'","decision":"exclude","jaccard":', b',"kept":',
           b'{"package_id":', b',"sample_id":', b'},"package_id":',
           b'","decision":"exclude","jaccard":1.0,"kept":', b',"scope":', b',"split":',
           b',"text_sha256":"', b'"}\n', b',"kept":null,"package_id":')
(_OPEN, _MID_NEAR, _KEPT, _REF_OPEN, _REF_SID, _REF_CLOSE, _MID_EXACT, _SCOPE, _SPLIT, _SHA,
 _CLOSE, _KEPT_NONE) = range(len(_PIECES))
_MIDDLE = len(_PIECES)


class _DecisionLines(NamedTuple):
    """``decisions.jsonl`` for `render_decisions`: per sample its outcome and the ids of the
    pieces its line is made of; the pieces as `ByteStrings`."""

    outcome: np.ndarray  # int64 per sample: a `REASONS` code, or len(REASONS): exact duplicate
    content: np.ndarray  # int64 per sample: its content
    package: np.ndarray  # int64 per sample: the piece of its package id
    split: np.ndarray  # int64 per sample: the piece of its split
    scope: np.ndarray  # int64 per content: the piece of its scope
    kept: np.ndarray  # int64 per sample: the sample that keeps it (-1: none)
    jaccard: np.ndarray  # int64 per sample: the piece of its Jaccard (-1: none)
    pieces: ByteStrings
    columns: ReportColumns
    bound: int  # no line is longer


def _decision_lines(pool: Pool, nodes: Nodes, decisions: Decisions, columns: ReportColumns,
                    tally: Tally) -> _DecisionLines:
    """``decisions.jsonl``'s rows (report order: input order, then package order) as pieces.
    A sample's outcome is its node's, or an exact duplicate of its node's first sample; the
    counts go to ``tally`` per (split, outcome) at once."""
    s = pool.samples
    n = len(s)
    node_of = np.empty(n, dtype=np.int64)
    node_of[nodes.samples] = np.repeat(np.arange(len(nodes)), np.diff(nodes.start))
    first = nodes.first
    head = first[node_of]
    reason = decisions.reason[node_of]
    exact = len(REASONS)  # outcome code of an exact duplicate of its node's first sample
    outcome = np.where((reason == NEAR_DUPLICATE) | (reason == RETAINED_SPLIT)
                       | (reason == TAKEDOWN) | (head == np.arange(n)), reason,
                       exact).astype(np.int64)
    labels = [("exclude" if r in (NEAR_DUPLICATE, TAKEDOWN) else "keep", REASONS[r])
              for r in range(len(REASONS))] + [("exclude", "exact_duplicate")]
    split_codes = len(s.split_labels)
    per = np.bincount(s.split * (exact + 1) + outcome, minlength=split_codes * (exact + 1))
    for code in np.flatnonzero(per).tolist():
        tally.decision(s.split_labels[code // (exact + 1)], *labels[code % (exact + 1)],
                       count=int(per[code]))
    near_nodes = np.flatnonzero((decisions.reason == NEAR_DUPLICATE)
                                | (decisions.reason == TAKEDOWN))
    kept_by = np.where(decisions.kept_by >= 0, first[decisions.kept_by], -1)[node_of]
    kept = np.where(outcome == NEAR_DUPLICATE, kept_by, np.where(outcome == exact, head, -1))
    pieces = list(_PIECES)
    pieces += [b'","decision":' + _dumps(d) + b',"jaccard":null,"kept":null,"package_id":'
               for d, _ in labels]
    pieces += [b',"reason":' + _dumps(r) + b',"sample_id":' for _, r in labels]
    package_at = len(pieces)
    pieces += [_dumps(p.package_id) for p in pool.packages]
    split_at = len(pieces)
    pieces += [_dumps(x) for x in s.split_labels]
    scope_at = len(pieces)
    scope_codes, scope_of = np.unique(pool.contents.scope, return_inverse=True)
    pieces += [_dumps(pool.scope_labels[c]) for c in scope_codes.tolist()]
    jaccard_at = len(pieces)
    pieces += _float_json(decisions.jaccard[near_nodes])
    jaccard_of = np.full(len(nodes), -1, dtype=np.int64)
    jaccard_of[near_nodes] = np.arange(jaccard_at, jaccard_at + len(near_nodes))
    text = ByteStrings.of(pieces)
    c = columns
    # a line has at most 16 pieces, two sample ids, a content id and a digest
    bound = 16 * text.longest() + 2 * c.sample_id_json.longest() + \
        2 * c.content_id.longest() + 2 * c.text_sha256.longest()
    return _DecisionLines(
        outcome=outcome, content=np.asarray(s.content, dtype=np.int64),
        package=package_at + s.input_pos, split=split_at + s.split,
        scope=scope_at + scope_of.reshape(-1), kept=np.asarray(kept, dtype=np.int64),
        jaccard=jaccard_of[node_of], pieces=text, columns=columns, bound=bound)


@numba.njit(inline="always")
def _put(out, pos, data, start, j):
    for t in range(start[j], start[j + 1]):
        out[pos] = data[t]
        pos += 1
    return pos


@numba.njit(inline="always")
def _put_hex(out, pos, data, start, j):
    for t in range(start[j], start[j + 1]):
        v = np.int64(data[t])
        high, low = v >> 4, v & 15
        out[pos] = high + 48 if high < 10 else high + 87  # 0-9, a-f
        out[pos + 1] = low + 48 if low < 10 else low + 87
        pos += 2
    return pos


@numba.njit(cache=True, nogil=True)
def render_decisions(lo, hi, out, bound, outcome, content, package, split, scope, kept,
                      jaccard, text, text_start, sid, sid_start, cid, cid_start, sha,
                      sha_start, near, exact, down):
    """Decision lines of samples ``lo``… into ``out`` while one more line (at most ``bound``
    bytes) fits, and at least one; returns (the next sample, bytes written). The arguments
    are the fields of `_DecisionLines` and its `ByteStrings` (``text``: the pieces, ``sid``,
    ``cid``, ``sha``: the `ReportColumns`), their fixed piece ids those of `_PIECES`."""
    after = _MIDDLE + exact + 1  # the "after" pieces follow the middle ones
    pos = 0
    i = lo
    while i < hi and (i == lo or pos + bound <= out.shape[0]):
        o = outcome[i]
        pos = _put(out, pos, text, text_start, _OPEN)
        pos = _put_hex(out, pos, cid, cid_start, content[i])
        if o == near or o == exact:
            if o == near:
                pos = _put(out, pos, text, text_start, _MID_NEAR)
                pos = _put(out, pos, text, text_start, jaccard[i])
                pos = _put(out, pos, text, text_start, _KEPT)
            else:
                pos = _put(out, pos, text, text_start, _MID_EXACT)
            k = kept[i]
            pos = _put(out, pos, text, text_start, _REF_OPEN)
            pos = _put(out, pos, text, text_start, package[k])
            pos = _put(out, pos, text, text_start, _REF_SID)
            pos = _put(out, pos, sid, sid_start, k)
            pos = _put(out, pos, text, text_start, _REF_CLOSE)
        elif o == down:  # taken down: its Jaccard, no kept sample
            pos = _put(out, pos, text, text_start, _MID_NEAR)
            pos = _put(out, pos, text, text_start, jaccard[i])
            pos = _put(out, pos, text, text_start, _KEPT_NONE)
        else:
            pos = _put(out, pos, text, text_start, _MIDDLE + o)
        pos = _put(out, pos, text, text_start, package[i])
        pos = _put(out, pos, text, text_start, after + o)
        pos = _put(out, pos, sid, sid_start, i)
        pos = _put(out, pos, text, text_start, _SCOPE)
        pos = _put(out, pos, text, text_start, scope[content[i]])
        pos = _put(out, pos, text, text_start, _SPLIT)
        pos = _put(out, pos, text, text_start, split[i])
        pos = _put(out, pos, text, text_start, _SHA)
        pos = _put_hex(out, pos, sha, sha_start, i)
        pos = _put(out, pos, text, text_start, _CLOSE)
        i += 1
    return i, pos


def _readonly(data: np.ndarray) -> np.ndarray:
    """``data`` as a read-only view (the bytes of `ByteStrings` made by ``np.frombuffer`` are;
    those a worker sent back are not): one type, so one compiled overload of the kernel."""
    view = data.view()
    view.flags.writeable = False
    return view


def _render(lines: _DecisionLines, i: int, out: np.ndarray) -> tuple[int, int]:
    """`render_decisions` of ``lines`` from sample ``i`` into ``out``, with the argument
    types `reserve.load_kernels` loads it for."""
    p, c = lines, lines.columns
    return render_decisions(
        i, len(p.outcome), out, p.bound, p.outcome, p.content, p.package, p.split, p.scope,
        p.kept, p.jaccard, _readonly(p.pieces.data), p.pieces.start,
        _readonly(c.sample_id_json.data), c.sample_id_json.start,
        _readonly(c.content_id.data), c.content_id.start, _readonly(c.text_sha256.data),
        c.text_sha256.start, NEAR_DUPLICATE, len(REASONS), TAKEDOWN)


def render_nothing() -> None:
    """Run the decisions kernel on no samples (`reserve.load_kernels`, in the thread that
    will write ``decisions.jsonl``)."""
    none = np.zeros(0, dtype=np.int64)
    empty = ByteStrings(np.frombuffer(b"", dtype=np.uint8), np.zeros(1, dtype=np.int64))
    _render(_DecisionLines(outcome=none, content=none, package=none, split=none, scope=none,
                           kept=none, jaccard=none, pieces=empty,
                           columns=ReportColumns(empty, empty, empty), bound=0),
            0, np.zeros(1, dtype=np.uint8))


def _write_decisions(path: Path, lines: _DecisionLines, out: np.ndarray) -> tuple[int, str]:
    """Write ``decisions.jsonl``, a buffer ``out`` at a time (room for two of the longest
    lines); returns (lines, sha256 hex of the file). Rendering, writing and hashing release
    the GIL: this runs in a thread beside the relations (few buffers, so few waits for the
    GIL)."""
    n = len(lines.outcome)
    h = hashlib.sha256()
    i = 0
    with open(path, "wb") as fh:
        while i < n:
            i, m = _render(lines, i, out)
            data = out[:m].data
            fh.write(data)
            h.update(data)
    return n, h.hexdigest()


def _takedown_rows(hits: TakedownHits | None, down: NodeTakedowns, node: int, members: int,
                   tally: Tally, samples_down: dict[int, int] | None
                   ) -> list[tuple[bytes, bytes, str, float]]:
    """The takedown relations of a node taken down, each (JSON up to the sample, JSON after
    it, kind, Jaccard), counted for its ``members`` samples in ``tally`` and, per act, in
    ``samples_down``."""
    assert hits is not None and samples_down is not None
    rows = range(int(down.start[node]), int(down.end[node]))
    for a in {int(hits.act[q]) for q in rows}:
        samples_down[a] = samples_down.get(a, 0) + members
    out = []
    for q in rows:
        item = hits.item_of(q)
        kind = "exact" if hits.exact[q] else "near"
        j = float(hits.jaccard[q])
        out.append((b"".join((
            b'{"blocked_by":null,"history_only":false,"jaccard":', _dumps(j), b',"kind":',
            _dumps(kind), b',"match":{"content_id":"', item.text_id.encode(),
            b'","package_id":null,"sample_id":null},"match_sources":[],"sample":')),
            b',"takedown":' + _dumps({"item": item.id,
                                      "request_id": hits.acts[int(hits.act[q])].request_id},
                                     option=orjson.OPT_SORT_KEYS) + b"}\n", kind, j))
        tally.relation(kind, False, None, j, members, takedown=True)
    return out


def _relation_lines(snap: db.Snapshot, pool: Pool, nodes: Nodes, near: Matches,
                    hist: Matches, render: _Render, tally: Tally,
                    pool_outside: OutsideSources, hits: TakedownHits | None = None,
                    down: NodeTakedowns | None = None,
                    samples_down: dict[int, int] | None = None) -> Iterator[bytes]:
    """``relations.jsonl`` rows: per node and sample in decision order, the exact relation to
    the node's first sample, the exact history relation, near matches in the pool, near
    history matches by content_id, then the takedowns that take the node down (``hits``,
    per node ``down``; ``samples_down`` counts the samples each act took down).
    ``match_sources`` lists the matched content's sources in the same split outside the
    current pool (``pool_outside``: those of the pool's contents, `pool_outside_sources`)."""
    rowid = pool.contents.rowid
    node_rowid = rowid[nodes.content]
    outside = dict(pool_outside)
    outside.update(_outside_sources(snap, pool, np.setdiff1d(hist.other, node_rowid)))
    sources_json: dict[tuple[int, str], bytes] = {}

    def sources(content: int, split: str) -> bytes:
        key = (content, split)
        if key not in outside:
            return b"[]"
        found = sources_json.get(key)
        if found is None:  # (bytes() keeps the rendering, not orjson's larger buffer)
            found = sources_json[key] = bytes(memoryview(_dumps(outside[key],
                                                                option=orjson.OPT_SORT_KEYS)))
        return found

    split_labels = nodes.split_labels
    near_bounds = np.searchsorted(near.later, np.arange(len(nodes) + 1))
    hist_bounds = np.searchsorted(hist.later, np.arange(len(nodes) + 1))
    busy = (np.diff(nodes.start) > 1) | (np.diff(near_bounds) > 0) | (np.diff(hist_bounds) > 0)
    if down is not None:
        busy |= down.down
    if outside:
        busy |= np.fromiter(((c, split_labels[sp]) in outside
                             for c, sp in zip(node_rowid.tolist(), nodes.split.tolist(), strict=True)),
                            dtype=bool, count=len(nodes))
    # Python values of the busy nodes only (a node with one sample and no relation writes
    # nothing), and of each near match's node: its first sample and content
    at = np.flatnonzero(busy)
    busy_rowid, busy_content, busy_split = (node_rowid[at].tolist(), nodes.content[at].tolist(),
                                            nodes.split[at].tolist())
    busy_start, busy_end = nodes.start[at].tolist(), nodes.start[at + 1].tolist()
    near_from, near_to = near_bounds[at].tolist(), near_bounds[at + 1].tolist()
    hist_from, hist_to = hist_bounds[at].tolist(), hist_bounds[at + 1].tolist()
    samples = nodes.samples
    match_content = nodes.content[near.other]
    match_first = nodes.first[near.other].tolist()
    match_rowid = rowid[match_content].tolist()
    match_contents = match_content.tolist()
    near_jac, near_blocked = near.jaccard.tolist(), near.blocked.tolist()
    hist_other, hist_jac, hist_blocked = (hist.other.tolist(), hist.jaccard.tolist(),
                                          hist.blocked.tolist())
    near_jac_json, hist_jac_json = _float_json(near.jaccard), _float_json(hist.jaccard)
    content_id = pool.contents.content_id
    blocked_json = render.blocked
    ref = render.ref
    exact_head = b'{"blocked_by":null,"history_only":false,"jaccard":1.0,"kind":"exact","match":'
    exact_history = b'{"blocked_by":null,"history_only":true,"jaccard":1.0,"kind":"exact",' \
                    b'"match":'
    for node in range(len(at)):
        content = busy_rowid[node]
        split = split_labels[busy_split[node]]
        members = samples[busy_start[node]:busy_end[node]].tolist()
        m = len(members)
        own_hex = content_id[busy_content[node]].hex()
        own_history = (content, split) in outside
        own_sources = sources(content, split)
        # each row's JSON up to its "sample" (the same for every sample of the node)
        rows = []
        for q in range(near_from[node], near_to[node]):
            j, rule = near_jac[q], near_blocked[q]
            tally.relation("near", False, BLOCKED_BY[rule], j, m)
            rows.append(b"".join((
                b'{"blocked_by":', blocked_json[rule], b',"history_only":false,"jaccard":',
                near_jac_json[q], b',"kind":"near","match":',
                render.match(content_id[match_contents[q]].hex(), match_first[q]),
                b',"match_sources":', sources(match_rowid[q], split), b',"sample":')))
        hs, he = hist_from[node], hist_to[node]
        if hs < he:
            for h_hex, q in sorted((render.history_hex(hist_other[q]), q) for q in range(hs, he)):
                h, j, rule = hist_other[q], hist_jac[q], hist_blocked[q]
                tally.relation("near", True, BLOCKED_BY[rule], j, m)
                rows.append(b"".join((
                    b'{"blocked_by":', blocked_json[rule], b',"history_only":true,"jaccard":',
                    hist_jac_json[q], b',"kind":"near","match":', render.match(h_hex, None),
                    b',"match_sources":', sources(h, split), b',"sample":')))
        exact_row = b""
        if m > 1:
            tally.relation("exact", False, None, 1.0, m - 1)
            exact_row = b"".join((exact_head, render.match(own_hex, members[0]),
                                  b',"match_sources":', own_sources, b',"sample":'))
        takedown_rows = [] if down is None or not down.down[at[node]] else \
            _takedown_rows(hits, down, int(at[node]), m, tally, samples_down)
        history_row = b""
        if own_history:
            tally.relation("exact", True, None, 1.0, m)
            history_row = b"".join((exact_history, render.match(own_hex, None),
                                    b',"match_sources":', own_sources, b',"sample":'))
        for k, sample_index in enumerate(members):
            sample = ref(sample_index) + b"}\n"
            if k > 0:
                yield exact_row + sample
            if own_history:
                yield history_row + sample
            for row in rows:
                yield row + sample
            if takedown_rows:
                own = ref(sample_index)
                for head, tail, _, _ in takedown_rows:
                    yield head + own + tail


def write_report(folder: Path, snap: db.Snapshot, pool: Pool, nodes: Nodes,
                 decisions: Decisions, near: Matches, hist: Matches, cand: Candidates,
                 config: NearDedupConfig, columns: ReportColumns,
                 origins: tuple[int, str], pool_outside: OutsideSources,
                 writer: Executor, hits: TakedownHits | None = None,
                 down: NodeTakedowns | None = None) -> dict:
    """Write decisions, relations, manifest and checksums into the staging ``folder``, where
    ``origins.jsonl`` (``origins``: its lines and sha256) is already; ``columns`` come from
    `report_columns`, ``pool_outside`` from `pool_outside_sources`; ``decisions.jsonl`` is
    written by ``writer``, the thread reserved at the start of the scan (`reserve.reserved`);
    ``hits`` and ``down``: the takedowns in force and the nodes they take down (None: none in
    force, and the report is of format 1). Returns the manifest's ``counts``."""
    tally = Tally(config.threshold)
    render = _Render(pool, cand.history)
    digests = {"origins.jsonl": origins[1]}
    lines = _decision_lines(pool, nodes, decisions, columns, tally)
    samples_down: dict[int, int] = {}
    # decisions.jsonl is rendered by a kernel without the GIL, beside relations.jsonl; its
    # buffer is taken here, before the relations' first `headroom` check
    out = np.empty(max(DECISIONS_BUFFER, 2 * lines.bound), dtype=np.uint8)
    written = writer.submit(_write_decisions, folder / "decisions.jsonl", lines, out)
    n_rel, rel_sha = write_lines(
        folder / "relations.jsonl",
        _checked(_relation_lines(snap, pool, nodes, near, hist, render, tally, pool_outside,
                                hits, down, samples_down)))
    n_dec, digests["decisions.jsonl"] = written.result()
    digests["relations.jsonl"] = rel_sha
    manifest = ReportManifest(
        format=FORMAT, format_version=FORMAT_VERSION if hits is not None else 1,
        tool_version=__version__,
        algorithm_version=ALGORITHM_VERSION, config=config,
        config_fingerprint=config.fingerprint(),
        inputs=[ReportInput.model_validate({
            "package_id": p.package_id, "kind": p.kind, "manifest_sha256": p.manifest_sha256,
            "records": p.record_count, "path": str(p.path)}) for p in pool.packages],
        index=IndexState(packages=[IndexStatePackage(**p) for p in pool.index_packages],
                         batches=pool.index_batches, contents=pool.index_contents),
        counts=ReportCounts(**tally.counts(), candidates=CandidateCounts(
            lsh_pairs=cand.lsh_pairs,
            after_filters=len(cand.pool_pairs) + len(cand.history_pairs))),
        files=ReportFiles.of_lines(decisions=n_dec, relations=n_rel, origins=origins[0]),
        takedowns=None if hits is None else [AppliedTakedown.model_validate(t)
                                             for t in applied(hits, samples_down)])
    raw = manifest.to_json()
    write_json(folder / "manifest.json", raw)
    write_checksums(folder, digests)
    return raw["counts"]
