"""The report files of a scan: decisions, relations (each verified pair once, from the later
sample's side), origins, manifest and checksums, staged and renamed into place. The format
itself (files, fields, reasons, counts) is defined in `near_dedup_core.report`."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import orjson

from near_dedup_core import ALGORITHM_VERSION, __version__
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.fsutil import atomic_dir, write_checksums, write_json, write_jsonl
from near_dedup_core.index_store import ContentRow, IndexSnapshot
from near_dedup_core.report import FORMAT, FORMAT_VERSION, count_decisions
from near_dedup_core.scan.records import Candidates, Decision, Match, Node, Pool, Sample


def _ref(s: Sample) -> dict:
    return {"package_id": s.package_id, "sample_id": s.sample_id}


def _outside_sources(snap: IndexSnapshot, pool: Pool,
                     contents: set[int]) -> dict[tuple[int, str], list[dict]]:
    """(content, split) -> sources outside the pool, sorted."""
    pool_ids = {p.package_id for p in pool.packages}
    found: dict[tuple[int, str], list[dict]] = defaultdict(list)
    for r in snap.outside_sources(sorted(contents), pool_ids):
        found[(r.content, r.split)].append({"package_id": r.package_id,
                                            "sample_id": r.sample_id, "split": r.split})
    for rows in found.values():
        rows.sort(key=lambda r: (r["package_id"], r["sample_id"]))
    return found


def _relations(snap: IndexSnapshot, pool: Pool, nodes: list[Node], near: dict[int, list[Match]],
               hist: dict[int, list[Match]], history: dict[int, ContentRow]) -> list[dict]:
    """``relations.jsonl`` rows: per node and sample in decision order, the exact relation to
    the node's first sample, the exact history relation, near matches in the pool, then near
    history matches by content_id. ``match_sources`` lists the matched content's sources in
    the same split outside the current pool."""
    content_hex = {c: v.content_id.hex() for c, v in pool.content.items()}
    content_hex.update({h: v.content_id.hex() for h, v in history.items()})
    wanted = {n.content for n in nodes} | {m.other for rows in hist.values() for m in rows}
    outside = _outside_sources(snap, pool, wanted)
    rels = []
    for idx, node in enumerate(nodes):
        first = node.samples[0]
        own_history = outside.get((node.content, node.split), [])
        near_rows = sorted(near.get(idx, ()))
        hist_rows = sorted(hist.get(idx, ()), key=lambda m: content_hex[m.other])
        for k, s in enumerate(node.samples):
            sample = _ref(s)
            if k > 0:
                rels.append({"sample": sample, "kind": "exact", "jaccard": 1.0,
                             "history_only": False, "blocked_by": None,
                             "match": {"content_id": content_hex[node.content], **_ref(first)},
                             "match_sources": own_history})
            if own_history:
                rels.append({"sample": sample, "kind": "exact", "jaccard": 1.0,
                             "history_only": True, "blocked_by": None,
                             "match": {"content_id": content_hex[node.content],
                                       "package_id": None, "sample_id": None},
                             "match_sources": own_history})
            for a, j, blocked in near_rows:
                m = nodes[a]
                rels.append({"sample": sample, "kind": "near", "jaccard": j,
                             "history_only": False, "blocked_by": blocked,
                             "match": {"content_id": content_hex[m.content], **_ref(m.samples[0])},
                             "match_sources": outside.get((m.content, node.split), [])})
            for h, j, blocked in hist_rows:
                rels.append({"sample": sample, "kind": "near", "jaccard": j,
                             "history_only": True, "blocked_by": blocked,
                             "match": {"content_id": content_hex[h], "package_id": None,
                                       "sample_id": None},
                             "match_sources": outside.get((h, node.split), [])})
    return rels


def write_report(output: Path, snap: IndexSnapshot, pool: Pool, nodes: list[Node],
                 decisions: dict[int, Decision], near: dict[int, list[Match]],
                 hist: dict[int, list[Match]], cand: Candidates, config: NearDedupConfig) -> dict:
    """Write the report folder atomically; returns the manifest's ``counts``."""
    scope_of = {c: pool.scope_labels[v.scope] for c, v in pool.content.items()}
    in_order = sorted(pool.samples, key=lambda s: (s.input_pos, s.position))
    dec_rows = []
    origin_rows = []
    for s in in_order:
        d = decisions[id(s)]
        dec_rows.append({
            "package_id": s.package_id, "sample_id": s.sample_id, "split": s.split,
            "scope": scope_of[s.content], "content_id": pool.content[s.content].content_id.hex(),
            "text_sha256": s.text_sha256.hex(), "decision": d.decision,
            "kept": _ref(d.kept) if d.kept is not None else None, "reason": d.reason,
            "jaccard": d.jaccard})
        origin_rows.append({
            "package_id": s.package_id, "sample_id": s.sample_id, "split": s.split,
            "file": s.file, "line": s.line,
            "source": orjson.loads(s.source) if s.source is not None else None})
    relations = _relations(snap, pool, nodes, near, hist, cand.history)
    counts = count_decisions(dec_rows, relations, config.threshold)
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
        "files": {"decisions.jsonl": {"lines": len(dec_rows)},
                  "relations.jsonl": {"lines": len(relations)},
                  "origins.jsonl": {"lines": len(origin_rows)}},
    }
    with atomic_dir(output) as tmp:
        write_jsonl(tmp / "decisions.jsonl", dec_rows)
        write_jsonl(tmp / "relations.jsonl", relations)
        write_jsonl(tmp / "origins.jsonl", origin_rows)
        write_json(tmp / "manifest.json", manifest)
        write_checksums(tmp)
    return counts
