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
                     contents: list[int]) -> dict[tuple[int, str], list[dict]]:
    """(content row id, split) -> sources outside the pool, sorted; nothing when the index
    holds no package outside the pool."""
    found: dict[tuple[int, str], list[dict]] = defaultdict(list)
    if not pool.has_history():
        return found
    pool_ids = {p.package_id for p in pool.packages}
    for r in snap.outside_sources(sorted(set(contents)), pool_ids):
        found[(r.content, r.split)].append({"package_id": r.package_id,
                                            "sample_id": r.sample_id, "split": r.split})
    for rows in found.values():
        rows.sort(key=lambda r: (r["package_id"], r["sample_id"]))
    return found


class _Refs:
    """Sample references and content ids of the pool, rendered on demand."""

    def __init__(self, pool: Pool, history: db.ContentColumns) -> None:
        self.package_id = [p.package_id for p in pool.packages]
        self.input_pos = pool.samples.input_pos.tolist()
        self.sample_id = pool.samples.sample_id
        self.content_id = pool.contents.content_id
        self.history = history

    def ref(self, sample: int) -> dict:
        return {"package_id": self.package_id[self.input_pos[sample]],
                "sample_id": self.sample_id[sample]}

    def history_hex(self, rowid: int) -> str:
        h = self.history
        return h.content_id[int(np.searchsorted(h.rowid, rowid))].hex()


def _decision_lines(pool: Pool, nodes: Nodes, decisions: Decisions, refs: _Refs,
                    tally: Tally) -> Iterator[bytes]:
    """``decisions.jsonl`` rows in report order (input order, then package order)."""
    s = pool.samples
    c = pool.contents
    node_of = np.empty(len(s), dtype=np.int64)
    node_of[nodes.samples] = np.repeat(np.arange(len(nodes)), np.diff(nodes.start))
    first = nodes.first
    is_first = (first[node_of] == np.arange(len(s))).tolist()
    reason = decisions.reason[node_of].tolist()
    kept_by = decisions.kept_by[node_of].tolist()
    jaccard = decisions.jaccard[node_of].tolist()
    head = first[node_of].tolist()
    first_list = first.tolist()
    scope = [pool.scope_labels[x] for x in c.scope.tolist()]
    content = s.content.tolist()
    package_id = refs.package_id
    input_pos = refs.input_pos
    for i in range(len(s)):
        r = reason[i]
        kept: dict | None = None
        jac: float | None = None
        if r == RETAINED_SPLIT:
            decision, why = "keep", "retained_split"
        elif r == NEAR_DUPLICATE:
            decision, why = "exclude", "near_duplicate"
            kept, jac = refs.ref(first_list[kept_by[i]]), jaccard[i]
        elif is_first[i]:
            decision, why = "keep", REASONS[r]
        else:
            decision, why = "exclude", "exact_duplicate"
            kept, jac = refs.ref(head[i]), 1.0
        split = s.split[i]
        tally.decision(split, decision, why)
        k = content[i]
        yield json_line({
            "package_id": package_id[input_pos[i]], "sample_id": s.sample_id[i],
            "split": split, "scope": scope[k], "content_id": c.content_id[k].hex(),
            "text_sha256": s.text_sha256[i].hex(), "decision": decision, "kept": kept,
            "reason": why, "jaccard": jac})


def _relation_lines(snap: db.IndexSnapshot, pool: Pool, nodes: Nodes, near: Matches,
                    hist: Matches, refs: _Refs, tally: Tally) -> Iterator[bytes]:
    """``relations.jsonl`` rows: per node and sample in decision order, the exact relation to
    the node's first sample, the exact history relation, near matches in the pool, then near
    history matches by content_id. ``match_sources`` lists the matched content's sources in
    the same split outside the current pool."""
    rowid = pool.contents.rowid
    node_rowid = rowid[nodes.content]
    outside = _outside_sources(snap, pool, node_rowid.tolist() + hist.other.tolist())
    split_labels = nodes.split_labels
    counts = np.diff(nodes.start)
    near_start = np.searchsorted(near.later, np.arange(len(nodes) + 1))
    hist_start = np.searchsorted(hist.later, np.arange(len(nodes) + 1))
    busy = (counts > 1) | (np.diff(near_start) > 0) | (np.diff(hist_start) > 0)
    if outside:
        busy |= np.fromiter(((c, split_labels[sp]) in outside for c, sp in
                             zip(node_rowid.tolist(), nodes.split.tolist())),
                            dtype=bool, count=len(nodes))
    first = nodes.first
    blocked_by = BLOCKED_BY
    for idx in np.flatnonzero(busy).tolist():
        content = int(node_rowid[idx])
        split = split_labels[int(nodes.split[idx])]
        members = nodes.members(idx)
        own_hex = pool.contents.content_id[int(nodes.content[idx])].hex()
        own_history = outside.get((content, split), [])
        near_rows = [(a, j, blocked_by[b]) for a, j, b in zip(
            near.other[near_start[idx]:near_start[idx + 1]].tolist(),
            near.jaccard[near_start[idx]:near_start[idx + 1]].tolist(),
            near.blocked[near_start[idx]:near_start[idx + 1]].tolist())]
        hist_rows = sorted(((refs.history_hex(h), h, j, blocked_by[b]) for h, j, b in zip(
            hist.other[hist_start[idx]:hist_start[idx + 1]].tolist(),
            hist.jaccard[hist_start[idx]:hist_start[idx + 1]].tolist(),
            hist.blocked[hist_start[idx]:hist_start[idx + 1]].tolist())))
        head = refs.ref(members[0])
        for k, sample_index in enumerate(members):
            sample = refs.ref(sample_index)
            if k > 0:
                tally.relation("exact", False, None, 1.0)
                yield json_line({"sample": sample, "kind": "exact", "jaccard": 1.0,
                                 "history_only": False, "blocked_by": None,
                                 "match": {"content_id": own_hex, **head},
                                 "match_sources": own_history})
            if own_history:
                tally.relation("exact", True, None, 1.0)
                yield json_line({"sample": sample, "kind": "exact", "jaccard": 1.0,
                                 "history_only": True, "blocked_by": None,
                                 "match": {"content_id": own_hex, "package_id": None,
                                           "sample_id": None},
                                 "match_sources": own_history})
            for a, j, blocked in near_rows:
                tally.relation("near", False, blocked, j)
                m_content = int(nodes.content[a])
                yield json_line({"sample": sample, "kind": "near", "jaccard": j,
                                 "history_only": False, "blocked_by": blocked,
                                 "match": {"content_id": pool.contents.content_id[m_content].hex(),
                                           **refs.ref(int(first[a]))},
                                 "match_sources": outside.get((int(rowid[m_content]), split), [])})
            for h_hex, h, j, blocked in hist_rows:
                tally.relation("near", True, blocked, j)
                yield json_line({"sample": sample, "kind": "near", "jaccard": j,
                                 "history_only": True, "blocked_by": blocked,
                                 "match": {"content_id": h_hex, "package_id": None,
                                           "sample_id": None},
                                 "match_sources": outside.get((h, split), [])})


def write_report(folder: Path, snap: db.IndexSnapshot, pool: Pool, nodes: Nodes,
                 decisions: Decisions, near: Matches, hist: Matches, cand: Candidates,
                 config: NearDedupConfig, origins: tuple[int, str]) -> dict:
    """Write decisions, relations, manifest and checksums into the staging ``folder``, where
    ``origins.jsonl`` (``origins``: its lines and sha256) is already; returns the manifest's
    ``counts``."""
    tally = Tally(config.threshold)
    refs = _Refs(pool, cand.history)
    digests = {"origins.jsonl": origins[1]}
    n_dec, digests["decisions.jsonl"] = write_lines(
        folder / "decisions.jsonl", _decision_lines(pool, nodes, decisions, refs, tally))
    n_rel, digests["relations.jsonl"] = write_lines(
        folder / "relations.jsonl", _relation_lines(snap, pool, nodes, near, hist, refs, tally))
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
