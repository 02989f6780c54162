"""The contamination report's files: ``summary.json`` and the manifest's ``counts`` as
recomputed from the pair lines (the writer and the verifier use the same functions)."""

from __future__ import annotations

from collections import defaultdict

FORMAT = "near-dedup-contamination"
FORMAT_VERSION = 1
FILES = ("contamination.jsonl", "summary.json")


def summarize(lines: list[dict], evals: list[dict], training_samples: int) -> dict:
    """``summary.json`` from the report lines and the per-eval item counts (``evals``:
    package_id, items, items_checked, items_skipped_short); `verify_contamination` recomputes
    it the same way."""
    leaked: dict[str, set] = defaultdict(set)
    affected: dict[str, set] = defaultdict(set)
    groups: dict[tuple[str, str | None, str], tuple[set, set]] = {}
    contaminated = set()
    for row in lines:
        e, t = row["eval"], row["training"]
        item = e["sample_id"]
        sample = (t["package_id"], t["sample_id"])
        leaked[e["package_id"]].add(item)
        affected[e["package_id"]].add(sample)
        contaminated.add(sample)
        g = groups.setdefault((e["package_id"], t["domain"], t["split"]), (set(), set()))
        g[0].add(item)
        g[1].add(sample)
    out = []
    for ev in evals:
        pid = ev["package_id"]
        by = [{"domain": d, "split": s, "items_leaked": len(g[0]), "training_samples": len(g[1])}
              for (p, d, s), g in sorted(groups.items(),
                                         key=lambda kv: (kv[0][0], kv[0][1] or "", kv[0][2]))
              if p == pid]
        out.append({**ev, "items_leaked": len(leaked[pid]),
                    "training_samples_affected": len(affected[pid]), "by_training": by})
    return {"evals": out, "pairs": len(lines),
            "training": {"samples": training_samples, "samples_contaminated": len(contaminated)}}


def counts_of(summary: dict) -> dict:
    """The manifest's ``counts`` (all recomputable from the lines and the eval item counts)."""
    ev = summary["evals"]
    return {"pairs": summary["pairs"],
            "items": sum(e["items"] for e in ev),
            "items_checked": sum(e["items_checked"] for e in ev),
            "items_skipped_short": sum(e["items_skipped_short"] for e in ev),
            "items_leaked": sum(e["items_leaked"] for e in ev),
            "training_samples": summary["training"]["samples"],
            "training_samples_contaminated": summary["training"]["samples_contaminated"]}
