"""The frozen near-dedup report: decisions, relations, origins, manifest, checksums.

Decision rule (SPEC §4 scan), applied to nodes (one content within one split) in first-ingest
order; all samples of a node are exact duplicates of each other:
- samples of retained splits are kept (``retained_split``);
- a node's first sample is excluded (``near_duplicate``) iff it directly matches, without a
  guard block, an earlier node whose first sample was kept; ``kept`` names the earliest such
  sample. No transitivity: a match with an excluded sample does not exclude (``match_not_kept``);
- the node's further samples are ``exact_duplicate`` of its first sample when that one is kept,
  otherwise ``near_duplicate`` of the same kept sample as the first;
- kept samples without any earlier pool match are ``unique``; those whose only earlier matches
  were kept apart by the numeric/unit guard are ``guard_blocked``;
- history-only matches are relations and never exclude.

``relations.jsonl`` lists each verified pair once, from the later sample's side. For matches
inside the pool, ``match`` names the matched node's first sample; ``match_sources`` lists the
matched content's sources in the same split outside the current pool (for history-only
matches, where the match has no pool sample, that is where it came from).

The files are canonical JSON lines (sorted keys): same index, inputs and config give
byte-identical files. The folder appears atomically.
"""

from __future__ import annotations

import bisect
import sqlite3
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import orjson

from near_dedup_core import ALGORITHM_VERSION, __version__
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.errors import NearDedupError
from near_dedup_core.fsutil import (
    atomic_dir,
    iter_json_objects,
    verify_checksums,
    write_checksums,
    write_json,
    write_jsonl,
)
from near_dedup_core.index_store import rows_in

FORMAT = "near-dedup-report"
FORMAT_VERSION = 1
FILES = ("decisions.jsonl", "relations.jsonl", "origins.jsonl")
HISTOGRAM_BINS = 5
DECISION_FIELDS = ("package_id", "sample_id", "split", "scope", "content_id", "text_sha256",
                   "decision", "kept", "reason", "jaccard")
RELATION_FIELDS = ("sample", "match", "jaccard", "kind", "history_only", "match_sources",
                   "blocked_by")


#: Every decision reason: the decision it comes with and what it means.
REASONS = {
    "unique": ("keep", "no verified match with an earlier sample of the pool"),
    "retained_split": ("keep", "in a retained split (validation): never deduplicated"),
    "guard_blocked": ("keep", "its only matches differ in numbers or units (the guard)"),
    "match_not_kept": ("keep", "matches only earlier samples that were themselves excluded"),
    "exact_duplicate": ("exclude", "same normalized text as an earlier kept sample"),
    "near_duplicate": ("exclude", "Jaccard at or above the threshold with an earlier kept one"),
}


def decision_summary(counts: dict) -> str:
    """``keep N (reason n, ...), exclude M (reason m, ...)`` from a manifest's counts."""
    parts = []
    for decision in ("keep", "exclude"):
        reasons = ", ".join(f"{reason} {n:,}" for reason, n in sorted(counts["by_reason"].items())
                            if REASONS.get(reason, ("exclude",))[0] == decision)
        parts.append(f"{decision} {counts[decision]:,}" + (f" ({reasons})" if reasons else ""))
    return ", ".join(parts)


@dataclass(slots=True)
class Decision:
    decision: str
    reason: str
    kept: object | None = None  # scan.Sample
    jaccard: float | None = None


def decide(pool, nodes, near, hist, config: NearDedupConfig) -> dict[int, Decision]:
    """Decision per sample (keyed by id(sample)), greedy over nodes in first-ingest order."""
    retained = set(config.retained_splits)
    kept_node: list[bool] = []
    out: dict[int, Decision] = {}
    for idx, node in enumerate(nodes):
        first = node.samples[0]
        if node.split in retained:
            kept_node.append(True)
            for s in node.samples:
                out[id(s)] = Decision("keep", "retained_split")
            continue
        edges = sorted(near.get(idx, ()))
        open_edges = [(a, j) for a, j, blocked in edges if blocked is None]
        kept_matches = [(a, j) for a, j in open_edges if kept_node[a]]
        if kept_matches:
            a, j = kept_matches[0]
            kept_node.append(False)
            target = nodes[a].samples[0]
            for s in node.samples:
                out[id(s)] = Decision("exclude", "near_duplicate", target, j)
            continue
        kept_node.append(True)
        reason = "match_not_kept" if open_edges else ("guard_blocked" if edges else "unique")
        out[id(first)] = Decision("keep", reason)
        for s in node.samples[1:]:
            out[id(s)] = Decision("exclude", "exact_duplicate", first, 1.0)
    return out


def _ref(s) -> dict:
    return {"package_id": s.package_id, "sample_id": s.sample_id}


def _outside_sources(con: sqlite3.Connection, pool, contents: set[int]) -> dict[tuple[int, str], list[dict]]:
    """(content, split) -> sources outside the pool, sorted."""
    pool_ids = {p.package_id for p in pool.packages}
    found: dict[tuple[int, str], list[dict]] = defaultdict(list)
    for content, pid, sid, split in rows_in(
            con, "SELECT s.content, p.package_id, s.sample_id, s.split FROM sources s "
                 "JOIN packages p ON p.id = s.package WHERE s.content IN ({})", sorted(contents)):
        if pid not in pool_ids:
            found[(content, split)].append({"package_id": pid, "sample_id": sid, "split": split})
    for rows in found.values():
        rows.sort(key=lambda r: (r["package_id"], r["sample_id"]))
    return found


def _relations(con, pool, nodes, near, hist, history) -> list[dict]:
    content_hex = {c: v[0].hex() for c, v in pool.content.items()}
    content_hex.update({h: v[0].hex() for h, v in history.items()})
    wanted = {n.content for n in nodes} | {h for rows in hist.values() for h, _, _ in rows}
    outside = _outside_sources(con, pool, wanted)
    rels = []
    for idx, node in enumerate(nodes):
        first = node.samples[0]
        own_history = outside.get((node.content, node.split), [])
        near_rows = sorted(near.get(idx, ()))
        hist_rows = sorted(hist.get(idx, ()), key=lambda r: content_hex[r[0]])
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


def jaccard_edges(threshold: float, bins: int = HISTOGRAM_BINS) -> list[float]:
    """Edges of ``bins`` equal Jaccard bins from ``threshold`` to 1.0.

    Rounded to 10 decimals, so the default threshold 0.9 gives exactly 0.9, 0.92, …, 1.0.
    """
    width = (1.0 - threshold) / bins
    return [round(threshold + i * width, 10) for i in range(bins)] + [1.0]


def jaccard_bin(value: float, edges: Sequence[float]) -> int | None:
    """Index of the bin of ``value`` (1.0 falls in the last bin); None below the first edge."""
    if value < edges[0]:
        return None
    return min(bisect.bisect_right(edges, value) - 1, len(edges) - 2)


def bin_labels(edges: Sequence[float], separator: str = "-") -> list[str]:
    """``lo-hi`` per bin with the fewest decimals (at least 2) that show every edge exactly."""
    digits = next((d for d in range(2, 6) if all(round(e, d) == e for e in edges)), 6)
    return [f"{lo:.{digits}f}{separator}{hi:.{digits}f}" for lo, hi in pairwise(edges)]


def jaccard_histogram(values: Iterable[float], threshold: float) -> dict[str, int]:
    """Counts of Jaccard values per bin from the threshold to 1; none are below the threshold
    (near relations are verified at or above it), and one that were is counted in the first."""
    edges = jaccard_edges(threshold)
    labels = bin_labels(edges)
    counts = dict.fromkeys(labels, 0)
    for v in values:
        counts[labels[jaccard_bin(v, edges) or 0]] += 1
    return counts


def count_decisions(decisions: list[dict], relations: list[dict],
                    threshold: float | None = None) -> dict:
    """The manifest's ``counts``: recomputed the same way by ``verify_report``. The Jaccard
    histogram's bins start at ``threshold`` (None: the default config's)."""
    if threshold is None:
        threshold = NearDedupConfig().threshold
    by_split: dict[str, Counter] = defaultdict(Counter)
    by_reason: Counter = Counter()
    for d in decisions:
        by_split[d["split"]][d["decision"]] += 1
        by_reason[d["reason"]] += 1
    keep = sum(c["keep"] for c in by_split.values())
    return {
        "samples": len(decisions), "keep": keep, "exclude": len(decisions) - keep,
        "by_split": {s: {"keep": c["keep"], "exclude": c["exclude"]}
                     for s, c in sorted(by_split.items())},
        "by_reason": dict(sorted(by_reason.items())),
        "relations": len(relations),
        "history_only_relations": sum(1 for r in relations if r["history_only"]),
        "blocked_relations": sum(1 for r in relations if r["blocked_by"] is not None),
        "near_relations_jaccard": jaccard_histogram(
            [r["jaccard"] for r in relations if r["kind"] == "near" and r["blocked_by"] is None],
            threshold),
    }


def write_report(output: Path, con: sqlite3.Connection, index_path: Path, pool, nodes,
                 decisions: dict[int, Decision], near, hist, cand,
                 config: NearDedupConfig) -> dict:
    scope_of = {c: pool.scope_labels[v[1]] for c, v in pool.content.items()}
    in_order = sorted(pool.samples, key=lambda s: (s.input_pos, s.position))
    dec_rows = []
    origin_rows = []
    for s in in_order:
        d = decisions[id(s)]
        dec_rows.append({
            "package_id": s.package_id, "sample_id": s.sample_id, "split": s.split,
            "scope": scope_of[s.content], "content_id": pool.content[s.content][0].hex(),
            "text_sha256": s.text_sha256.hex(), "decision": d.decision,
            "kept": _ref(d.kept) if d.kept is not None else None, "reason": d.reason,
            "jaccard": d.jaccard})
        origin_rows.append({
            "package_id": s.package_id, "sample_id": s.sample_id, "split": s.split,
            "file": s.file, "line": s.line,
            "source": orjson.loads(s.source) if s.source is not None else None})
    relations = _relations(con, pool, nodes, near, hist, cand.history)
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


# --------------------------------------------------------------------------- reading


def load_manifest(path: str | Path) -> dict:
    path = Path(path)
    try:
        manifest = orjson.loads((path / "manifest.json").read_bytes())
    except FileNotFoundError:
        raise NearDedupError(f"report {path}: manifest.json is missing") from None
    except orjson.JSONDecodeError as exc:
        raise NearDedupError(f"report {path}: manifest.json is not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise NearDedupError(f"report {path}: manifest.json is not a near-dedup report manifest")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise NearDedupError(f"report {path}: format_version {manifest.get('format_version')} "
                             f"is not {FORMAT_VERSION}")
    return manifest


def _iter_jsonl(path: Path, name: str) -> Iterator[dict]:
    return (row for _, row in iter_json_objects(path, name, f"report {path}"))


def _require_fields(path: Path, name: str, rows: list[dict], fields: tuple[str, ...]) -> None:
    """Every line carries every field (a tampered line must fail with a message, not a
    KeyError); a decision's ``kept`` is null or a sample reference."""
    for n, row in enumerate(rows, 1):
        for field in fields:
            if field not in row:
                raise NearDedupError(f"report {path}: {name}:{n}: missing field '{field}'")
        if "kept" in fields and row["kept"] is not None and not isinstance(row["kept"], dict):
            raise NearDedupError(f"report {path}: {name}:{n}: kept must be null or an object "
                                 f"with package_id and sample_id")


def iter_decisions(path: str | Path) -> Iterator[dict]:
    return _iter_jsonl(Path(path), "decisions.jsonl")


@dataclass
class ReportSummary:
    path: Path
    manifest: dict

    @property
    def counts(self) -> dict:
        return self.manifest["counts"]

    def summary(self) -> str:
        c = self.counts
        return (f"report {self.path}: OK — checksums, manifest and {c['samples']:,} decisions "
                f"consistent (keep {c['keep']:,}, exclude {c['exclude']:,}, "
                f"{c['relations']:,} relations)")


def verify_report(path: str | Path) -> ReportSummary:
    """Check a report folder: checksums, manifest ↔ files, decisions ↔ origins line by line,
    exclusions pointing at kept samples. Raises NearDedupError naming the first problem."""
    path = Path(path)
    if not path.is_dir():
        raise NearDedupError(f"report {path}: not a directory")
    listed = verify_checksums(path, "report")
    for name in ("manifest.json", *FILES):
        if name not in listed:
            raise NearDedupError(f"report {path}: {name} is not listed in checksums.sha256")
    manifest = load_manifest(path)
    decisions = list(iter_decisions(path))
    relations = list(_iter_jsonl(path, "relations.jsonl"))
    _require_fields(path, "decisions.jsonl", decisions, DECISION_FIELDS)
    _require_fields(path, "relations.jsonl", relations, RELATION_FIELDS)
    files = manifest.get("files", {})
    for name, rows in (("decisions.jsonl", decisions), ("relations.jsonl", relations)):
        if files.get(name, {}).get("lines") != len(rows):
            raise NearDedupError(f"report {path}: {name} has {len(rows)} lines, manifest.json "
                                 f"says {files.get(name, {}).get('lines')}")
    origins = _iter_jsonl(path, "origins.jsonl")
    n = 0
    for n, (d, o) in enumerate(zip(decisions, origins, strict=False), 1):
        if (d.get("package_id"), d.get("sample_id"), d.get("split")) != \
                (o.get("package_id"), o.get("sample_id"), o.get("split")):
            raise NearDedupError(f"report {path}: origins.jsonl:{n} does not describe the sample "
                                 f"of decisions.jsonl:{n}")
    if n != len(decisions) or sum(1 for _ in _iter_jsonl(path, "origins.jsonl")) != len(decisions):
        raise NearDedupError(f"report {path}: origins.jsonl and decisions.jsonl differ in length")
    inputs = {i["package_id"]: i for i in manifest.get("inputs", [])}
    per_package = Counter(d.get("package_id") for d in decisions)
    for pid, info in inputs.items():
        if per_package.get(pid, 0) != info.get("records"):
            raise NearDedupError(f"report {path}: decisions.jsonl has {per_package.get(pid, 0)} "
                                 f"samples of {pid}, manifest.json says {info.get('records')}")
    decided = {(d["package_id"], d["sample_id"]): (n, d) for n, d in enumerate(decisions, 1)}
    retained = set(manifest.get("config", {}).get("retained_splits", []))
    for line, d in enumerate(decisions, 1):
        if d.get("package_id") not in inputs:
            raise NearDedupError(f"report {path}: decisions.jsonl:{line}: package "
                                 f"{d.get('package_id')} is not among the inputs")
        if d.get("decision") == "exclude":
            kept = d.get("kept") or {}
            target = decided.get((kept.get("package_id"), kept.get("sample_id")))
            if target is None or target[1]["decision"] != "keep" or target[0] == line:
                raise NearDedupError(f"report {path}: decisions.jsonl:{line}: excluded sample's "
                                     f"kept sample is not a kept sample of the pool")
            if d.get("split") in retained:
                raise NearDedupError(f"report {path}: decisions.jsonl:{line}: a sample of "
                                     f"retained split {d['split']} is excluded")
        elif d.get("decision") != "keep" or d.get("kept") is not None:
            raise NearDedupError(f"report {path}: decisions.jsonl:{line}: decision must be keep "
                                 f"(kept null) or exclude")
    threshold = manifest.get("config", {}).get("threshold")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) \
            or not 0 < threshold <= 1:
        raise NearDedupError(f"report {path}: manifest.json: config.threshold is not a "
                             f"number in (0, 1]")
    counts = count_decisions(decisions, relations, float(threshold))
    recorded = {k: v for k, v in manifest.get("counts", {}).items() if k != "candidates"}
    if recorded != counts:
        raise NearDedupError(f"report {path}: counts in manifest.json do not match "
                             f"decisions.jsonl and relations.jsonl")
    return ReportSummary(path, manifest)
