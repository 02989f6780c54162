"""Materialization metadata a release manager reads in the UI, built from the frozen outputs.

Numbers that are worth plotting across days (records in, kept, excluded, history-only
relations, selected; each domain's exclusion rate as a float under a stable key,
``exclusion_rate_<domain>``) are plain numbers; breakdowns are small markdown tables: by split, by
reason, by domain and the mixture plan; the similarity histogram of the report's relations is a
table of bins (`TableMetadataValue`: typed columns the UI sorts).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import dagster as dg
import orjson

from near_dedup_core.index_store import open_index
from near_dedup_core.ingest.run import IndexResult
from near_dedup_core.package import Package, open_packages, stream_records
from near_dedup_core.report import bin_labels, iter_decisions, jaccard_bin, jaccard_edges
from near_dedup_core.storage import Location

from near_dedup_assets.daily import DayPool, MixtureOutcome, ReportOutcome
from near_dedup_assets.locations import location_value

NO_DOMAIN = "(none)"
HISTOGRAM_BINS = 5


def md_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub-flavoured markdown table; numbers right-aligned and thousands-separated."""
    rows = [list(r) for r in rows]

    def cell(value: object) -> str:
        if isinstance(value, bool):
            return str(value).lower()
        if isinstance(value, int):
            return f"{value:,}"
        if isinstance(value, float):
            return f"{value:.4f}"
        return str(value).replace("|", "\\|")

    numeric = [bool(rows) and all(isinstance(r[i], (int, float)) for r in rows)
               for i in range(len(headers))]
    lines = ["| " + " | ".join(headers) + " |",
             "| " + " | ".join("---:" if n else "---" for n in numeric) + " |"]
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def _short(sha: str) -> str:
    return sha[:12] + "…"


# --------------------------------------------------------------------------- snapshot


def snapshot_metadata(pool: DayPool) -> dict:
    by_split: Counter[str] = Counter()
    rows = []
    for pkg in pool.packages:
        for entry in pkg.files:
            by_split[entry.split] += entry.records
        rows.append([pkg.package_id, pkg.kind, pkg.record_count, ", ".join(pkg.splits),
                     _short(pkg.manifest_sha256)])
    return {
        "records": dg.MetadataValue.int(pool.records),
        "packages": dg.MetadataValue.md(md_table(
            ["package", "kind", "records", "splits", "manifest sha256"], rows)),
        "records_by_split": dg.MetadataValue.md(md_table(
            ["split", "records"], sorted(by_split.items()))),
        "snapshot_folder": location_value(pool.folder),
    }


# --------------------------------------------------------------------------- index


def index_metadata(result: IndexResult, report: ReportOutcome) -> dict:
    backend = open_index(result.index)
    size = ({"index_bytes": dg.MetadataValue.int(backend.file.stat().st_size)}
            if backend.file is not None and backend.file.exists() else {})
    return {
        "backend": dg.MetadataValue.text({"postgres": "PostgreSQL", "iceberg": "Iceberg"}.get(
            backend.kind, "SQLite")),
        "batch": dg.MetadataValue.text("none: already indexed" if result.batch is None
                                       else str(result.batch)),
        "packages_added": dg.MetadataValue.text(", ".join(result.packages_added) or "none"),
        "packages_already_indexed": dg.MetadataValue.text(
            ", ".join(result.packages_skipped) or "none"),
        "records_appended": dg.MetadataValue.int(result.records),
        "new_contents": dg.MetadataValue.int(result.new_contents),
        "new_sources": dg.MetadataValue.int(result.new_sources),
        "band_rows_to": dg.MetadataValue.text(
            "none" if result.bands is None else result.bands.table),
        "band_rows_folded": dg.MetadataValue.int(0 if result.bands is None
                                                 else result.bands.folded),
        **size,
        "index": (dg.MetadataValue.path(str(backend.file)) if backend.file is not None
                  else dg.MetadataValue.text(backend.label)),
        "summary": dg.MetadataValue.text(result.summary()),
        "report": location_value(report.path),
        "report_was_already_frozen": dg.MetadataValue.bool(report.reused),
    }


# --------------------------------------------------------------------------- report


def sample_domains(packages: Sequence[Package]) -> dict[tuple[str, str], str]:
    """(package_id, sample_id) → domain; a ref without its own domain takes its target's."""
    domains: dict[tuple[str, str], str] = {}
    interned: dict[str, str] = {}
    for rec in stream_records(packages):
        domain = rec.data.get("domain")
        if domain is None and rec.ref is not None:
            domain = domains.get(rec.ref)
        domain = NO_DOMAIN if domain is None else str(domain)
        domains[(rec.package_id, rec.sample_id)] = interned.setdefault(domain, domain)
    return domains


def rate_key(domain: str | None) -> str:
    """The stable metadata key of a domain's exclusion rate: ``exclusion_rate_<domain>``,
    lower case, anything but letters and digits as ``_`` (no domain: ``(none)``)."""
    name = re.sub(r"[^a-z0-9]+", "_", (domain or "(none)").lower()).strip("_") or "none"
    return f"exclusion_rate_{name}"


def domain_rows(decisions: Iterable[dict], domains: dict[tuple[str, str], str]) -> list[list]:
    """Per domain: samples, kept, excluded, exact and near duplicates, excluded share."""
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for d in decisions:
        c = counts[domains.get((d["package_id"], d["sample_id"]), NO_DOMAIN)]
        c["samples"] += 1
        c[d["decision"]] += 1
        c[d["reason"]] += 1
    rows = []
    for domain in sorted(counts):
        c = counts[domain]
        share = f"{100 * c['exclude'] / c['samples']:.1f}%" if c["samples"] else "-"
        rows.append([domain, c["samples"], c["keep"], c["exclude"], c["exact_duplicate"],
                     c["near_duplicate"], share])
    return rows


def iter_relations(report: Path) -> Iterator[dict]:
    with open(report / "relations.jsonl", "rb") as fh:
        for line in fh:
            yield orjson.loads(line)


def similarity_histogram(relations: Iterable[dict], threshold: float,
                         bins: int = HISTOGRAM_BINS) -> list[list]:
    """Relations by Jaccard: the report's equal bins from the threshold to 1 (`jaccard_edges`),
    exact matches apart, and pool matches, history-only matches and guard-blocked pairs in
    separate columns; the last column is the row's total."""
    edges = jaccard_edges(threshold, bins)
    labels = bin_labels(edges, separator="–") if threshold < 1.0 else []
    below, exact = f"< {threshold:.3f}", "1.000 (exact)"
    table: dict[str, Counter[str]] = defaultdict(Counter)
    for rel in relations:
        jac = float(rel["jaccard"])
        index = jaccard_bin(jac, edges)
        if rel["kind"] == "exact" or jac >= 1.0 or not labels:
            label = exact
        elif index is None:
            label = below
        else:
            label = labels[index]
        column = ("guard-blocked" if rel.get("blocked_by")
                  else "history-only" if rel["history_only"] else "pool")
        table[label][column] += 1
    order = ([below] if below in table else []) + labels + [exact]
    return [[label, table[label]["pool"], table[label]["history-only"],
             table[label]["guard-blocked"], sum(table[label].values())] for label in order]


HISTOGRAM_COLUMNS = (("jaccard", "string", "Jaccard similarity bin (exact matches apart)"),
                     ("pool", "int", "pairs within the day's pool"),
                     ("history_only", "int", "pairs with the index's history only"),
                     ("guard_blocked", "int", "pairs kept apart by the numeric/unit guard"),
                     ("total", "int", "all pairs of the bin"))


def histogram_table(rows: Sequence[list]) -> dg.MetadataValue:
    """The similarity histogram as a table of bins (`similarity_histogram`'s rows), which the
    UI shows with typed, sortable columns."""
    schema = dg.TableSchema(columns=[dg.TableColumn(name, kind, description=text)
                                     for name, kind, text in HISTOGRAM_COLUMNS])
    names = [name for name, _, _ in HISTOGRAM_COLUMNS]
    return dg.MetadataValue.table(
        records=[dg.TableRecord(dict(zip(names, row, strict=True))) for row in rows],
        schema=schema)


def report_metadata(outcome: ReportOutcome, pool: DayPool) -> dict:
    manifest = outcome.manifest
    counts = manifest["counts"]
    split_rows = [[split, v["keep"] + v["exclude"], v["keep"], v["exclude"]]
                  for split, v in sorted(counts["by_split"].items())]
    reason_rows = sorted(counts["by_reason"].items())
    domains = sample_domains(open_packages(pool.paths))
    threshold = float(manifest["config"]["threshold"])
    by_domain = domain_rows(iter_decisions(outcome.folder), domains)
    rates = {rate_key(None if row[0] == NO_DOMAIN else row[0]):
             dg.MetadataValue.float(round(row[3] / row[1], 6)) for row in by_domain if row[1]}
    return {
        **rates,
        "records_in": dg.MetadataValue.int(counts["samples"]),
        "kept": dg.MetadataValue.int(counts["keep"]),
        "excluded": dg.MetadataValue.int(counts["exclude"]),
        "relations": dg.MetadataValue.int(counts["relations"]),
        "history_only_relations": dg.MetadataValue.int(counts["history_only_relations"]),
        "guard_blocked_relations": dg.MetadataValue.int(counts["blocked_relations"]),
        "by_split": dg.MetadataValue.md(md_table(["split", "records", "kept", "excluded"],
                                                 split_rows)),
        "by_reason": dg.MetadataValue.md(md_table(["reason", "samples"], reason_rows)),
        "by_domain": dg.MetadataValue.md(md_table(
            ["domain", "records", "kept", "excluded", "exact dup.", "near dup.", "excluded %"],
            by_domain)),
        "similarity_histogram": histogram_table(
            similarity_histogram(iter_relations(outcome.folder), threshold)),
        "inputs": dg.MetadataValue.text(", ".join(p.package_id for p in pool.packages)),
        "config_fingerprint": dg.MetadataValue.text(manifest["config_fingerprint"]),
        "report": location_value(outcome.path),
    }


#: The metadata key of a day without a release (no snapshot folder): its reason.
NO_RELEASE = "no_release"


def no_release_metadata(reason: str) -> dict:
    """A day whose snapshot folder does not exist: materialized as "no release that day"
    (nothing read, appended, scanned or built), not as a failure."""
    return {NO_RELEASE: dg.MetadataValue.text(
        f"{reason}; nothing was released. If the snapshot arrives later, materialize the day "
        f"again")}


def disabled_metadata(step: str) -> dict:
    return {
        "near_dedup": dg.MetadataValue.text("off"),
        "skipped": dg.MetadataValue.text(
            f"{step} skipped: near-dedup is switched off (NEAR_DEDUP_ENABLED=false); the "
            f"day's mixture is built without a report"),
    }


# --------------------------------------------------------------------------- mixture


def mixture_metadata(outcome: MixtureOutcome, release: Location, reused_release: bool) -> dict:
    counts = outcome.manifest["counts"]
    rows = [[r["domain"], r["available_before_dedup"], r["available_after_dedup"],
             float(r["weight"]), r["quota"], r["selected"], r["shortfall"]]
            for r in outcome.plan["domains"]]
    report = outcome.config.near_dedup_report
    return {
        "selected": dg.MetadataValue.int(counts["selected"]),
        # a setting, not a measurement: text, so it is not plotted as a flat line
        "target_records": dg.MetadataValue.text(f"{counts['target_records']:,}"),
        "shortfall": dg.MetadataValue.int(counts["shortfall"]),
        "retained_records": dg.MetadataValue.int(counts["retained"]),
        "excluded_by_report": dg.MetadataValue.int(counts["excluded_by_report"]),
        "plan": dg.MetadataValue.md(md_table(
            ["domain", "before dedup", "after dedup", "weight", "quota", "selected",
             "shortfall"], rows)),
        "strategy": dg.MetadataValue.text(outcome.config.strategy_label()),
        "near_dedup_report": dg.MetadataValue.text(report or "none: near-dedup is off"),
        "reused_published_mixture": dg.MetadataValue.bool(outcome.reused and reused_release),
        "mixture": location_value(outcome.path),
        "release_record": location_value(release),
    }
