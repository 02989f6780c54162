"""The report files of a scan: decisions, relations (each verified pair once, from the later
sample's side), origins, manifest and checksums, written into the staging folder that
`near_dedup_core.fsutil.atomic_dir` renames into place. The format itself (files, fields,
reasons, counts) is defined in `near_dedup_core.report`.

Rows are rendered and written one at a time (never a list of a million dicts), each file
hashed as it is written. ``origins.jsonl`` depends on nothing but the input packages, so
`write_origins` runs in a worker from the start of the scan, reading the packages' sources
on a connection of its own.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import orjson

from near_dedup_core import ALGORITHM_VERSION, __version__
from near_dedup_core import index_store as db
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.fsutil import json_line, write_checksums, write_json, write_lines
from near_dedup_core.report import FORMAT, FORMAT_VERSION, Tally
from near_dedup_core.scan.records import (
    BLOCKED_BY,
    NEAR_DUPLICATE,
    REASONS,
    RETAINED_SPLIT,
    Candidates,
    Decisions,
    Matches,
    Nodes,
    Pool,
)


def write_origins(source: str | db.IndexTexts, package_rowids: list[int],
                  package_ids: list[str], path: Path) -> tuple[int, str]:
    """``origins.jsonl``: every sample of the input packages in report order (input order,
    then package order) with its file, line and original ``source`` object; returns (lines,
    sha256). ``source`` is the scan's snapshot, or the index location to read from on a
    connection of its own (a package's sources never change once committed)."""
    reader = db.open_texts(source) if isinstance(source, str) else source

    def lines() -> Iterator[bytes]:
        for rowid, package_id in zip(package_rowids, package_ids):
            for sample_id, split, file, line, src in reader.package_origins(rowid):
                yield json_line({"package_id": package_id, "sample_id": sample_id,
                                 "split": split, "file": file, "line": line,
                                 "source": orjson.loads(src) if src is not None else None})

    try:
        return write_lines(path, lines())
    finally:
        if reader is not source:
            reader.close()


def _outside_sources(snap: db.IndexSnapshot, pool: Pool,
                     contents: np.ndarray) -> dict[tuple[int, str], list[dict]]:
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


class _Render:
    """Canonical JSON lines (`near_dedup_core.fsutil.json_line`: sorted keys, compact) of
    decision and relation rows, assembled from pieces: every value goes through
    ``orjson.dumps`` as it would inside the row's dict, and the keys are written in sorted
    order, so the bytes are those of ``json_line(row)`` at a fraction of the cost (no dict
    per row; repeated values such as package ids, splits and scopes rendered once)."""

    def __init__(self, pool: Pool, history: db.ContentColumns) -> None:
        self.package = [_dumps(p.package_id) for p in pool.packages]
        self.input_pos = pool.samples.input_pos.tolist()
        self.sample_id = pool.samples.sample_id
        self.split = [_dumps(x) for x in pool.samples.split_labels]
        self.content_id = pool.contents.content_id
        self.history = history
        scopes = {k: _dumps(v) for k, v in pool.scope_labels.items()}
        self.scope = [scopes[x] for x in pool.contents.scope.tolist()]
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


def _decision_lines(pool: Pool, nodes: Nodes, decisions: Decisions, render: _Render,
                    tally: Tally) -> Iterator[bytes]:
    """``decisions.jsonl`` rows in report order (input order, then package order). A
    sample's outcome is its node's, or an exact duplicate of its node's first sample; the
    counts go to ``tally`` per (split, outcome) at once."""
    s = pool.samples
    n = len(s)
    sha = s.text_sha256
    if sha is None:
        raise ValueError("the pool's text digests were not loaded")
    node_of = np.empty(n, dtype=np.int64)
    node_of[nodes.samples] = np.repeat(np.arange(len(nodes)), np.diff(nodes.start))
    first = nodes.first
    head = first[node_of]
    reason = decisions.reason[node_of]
    exact = len(REASONS)  # outcome code of an exact duplicate of its node's first sample
    outcome = np.where((reason == NEAR_DUPLICATE) | (reason == RETAINED_SPLIT)
                       | (head == np.arange(n)), reason, exact)
    labels = [("exclude" if r == NEAR_DUPLICATE else "keep", REASONS[r])
              for r in range(len(REASONS))] + [("exclude", "exact_duplicate")]
    split_codes = len(s.split_labels)
    per = np.bincount(s.split * (exact + 1) + outcome, minlength=split_codes * (exact + 1))
    for code in np.flatnonzero(per).tolist():
        tally.decision(s.split_labels[code // (exact + 1)], *labels[code % (exact + 1)],
                       count=int(per[code]))
    # the JSON between content_id and package_id, and between package_id and sample_id
    middle = [b'","decision":' + _dumps(d) + b',"jaccard":null,"kept":null,"package_id":'
              for d, _ in labels]
    after = [b',"reason":' + _dumps(r) + b',"sample_id":' for _, r in labels]
    kept_by = np.where(decisions.kept_by >= 0, first[decisions.kept_by], -1)[node_of].tolist()
    jaccard = decisions.jaccard[node_of].tolist()
    outcome_of = outcome.tolist()
    head_of = head.tolist()
    split = s.split.tolist()
    content = s.content.tolist()
    content_id = pool.contents.content_id
    scope = render.scope
    package = render.package
    input_pos = render.input_pos
    split_json = render.split
    sample_id = s.sample_id
    for i in range(n):
        o = outcome_of[i]
        if o == NEAR_DUPLICATE:
            mid = b"".join((b'","decision":"exclude","jaccard":', _dumps(jaccard[i]),
                            b',"kept":', render.ref(kept_by[i]), b',"package_id":'))
        elif o == exact:
            mid = b'","decision":"exclude","jaccard":1.0,"kept":' + render.ref(head_of[i]) + \
                b',"package_id":'
        else:
            mid = middle[o]
        k = content[i]
        yield b"".join((
            b'{"content_id":"', content_id[k].hex().encode(), mid, package[input_pos[i]],
            after[o], _dumps(sample_id[i]), b',"scope":', scope[k], b',"split":',
            split_json[split[i]], b',"text_sha256":"', sha[i].hex().encode(), b'"}\n'))


def _relation_lines(snap: db.IndexSnapshot, pool: Pool, nodes: Nodes, near: Matches,
                    hist: Matches, render: _Render, tally: Tally) -> Iterator[bytes]:
    """``relations.jsonl`` rows: per node and sample in decision order, the exact relation to
    the node's first sample, the exact history relation, near matches in the pool, then near
    history matches by content_id. ``match_sources`` lists the matched content's sources in
    the same split outside the current pool."""
    rowid = pool.contents.rowid
    node_rowid = rowid[nodes.content]
    outside = _outside_sources(snap, pool, np.concatenate([node_rowid, hist.other]))
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
    if outside:
        busy |= np.fromiter(((c, split_labels[sp]) in outside
                             for c, sp in zip(node_rowid.tolist(), nodes.split.tolist())),
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
                _dumps(j), b',"kind":"near","match":',
                render.match(content_id[match_contents[q]].hex(), match_first[q]),
                b',"match_sources":', sources(match_rowid[q], split), b',"sample":')))
        hs, he = hist_from[node], hist_to[node]
        if hs < he:
            for h_hex, q in sorted((render.history_hex(hist_other[q]), q) for q in range(hs, he)):
                h, j, rule = hist_other[q], hist_jac[q], hist_blocked[q]
                tally.relation("near", True, BLOCKED_BY[rule], j, m)
                rows.append(b"".join((
                    b'{"blocked_by":', blocked_json[rule], b',"history_only":true,"jaccard":',
                    _dumps(j), b',"kind":"near","match":', render.match(h_hex, None),
                    b',"match_sources":', sources(h, split), b',"sample":')))
        exact_row = b""
        if m > 1:
            tally.relation("exact", False, None, 1.0, m - 1)
            exact_row = b"".join((exact_head, render.match(own_hex, members[0]),
                                  b',"match_sources":', own_sources, b',"sample":'))
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


def write_report(folder: Path, snap: db.IndexSnapshot, pool: Pool, nodes: Nodes,
                 decisions: Decisions, near: Matches, hist: Matches, cand: Candidates,
                 config: NearDedupConfig, origins: tuple[int, str]) -> dict:
    """Write decisions, relations, manifest and checksums into the staging ``folder``, where
    ``origins.jsonl`` (``origins``: its lines and sha256) is already; returns the manifest's
    ``counts``."""
    tally = Tally(config.threshold)
    render = _Render(pool, cand.history)
    digests = {"origins.jsonl": origins[1]}
    n_dec, digests["decisions.jsonl"] = write_lines(
        folder / "decisions.jsonl", _decision_lines(pool, nodes, decisions, render, tally))
    n_rel, digests["relations.jsonl"] = write_lines(
        folder / "relations.jsonl", _relation_lines(snap, pool, nodes, near, hist, render, tally))
    counts = tally.counts()
    counts["candidates"] = {"lsh_pairs": cand.lsh_pairs,
                            "after_filters": len(cand.pool_pairs) + len(cand.history_pairs)}
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "tool_version": __version__,
        "algorithm_version": ALGORITHM_VERSION,
        "config": config.model_dump(mode="json"), "config_fingerprint": config.fingerprint(),
        "inputs": [{"package_id": p.package_id, "kind": p.kind,
                    "manifest_sha256": p.manifest_sha256, "records": p.record_count,
                    "path": str(p.path)} for p in pool.packages],
        "index": {"packages": pool.index_packages, "batches": pool.index_batches,
                  "contents": pool.index_contents},
        "counts": counts,
        "files": {"decisions.jsonl": {"lines": n_dec},
                  "relations.jsonl": {"lines": n_rel},
                  "origins.jsonl": {"lines": origins[0]}},
    }
    write_json(folder / "manifest.json", manifest)
    write_checksums(folder, digests)
    return counts
