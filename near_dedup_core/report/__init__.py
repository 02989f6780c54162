"""The frozen near-dedup report: its files' models (`near_dedup_core.formats.report`), its
counts (`counts`), `verify_report` (``report verify``, `verify`) and the check against the
input packages (``report verify --inputs``, `inputs`).

``relations.jsonl`` lists each verified pair once, from the later sample's side. For matches
inside the pool, ``match`` names the matched node's first sample; ``match_sources`` lists the
matched content's sources in the same split outside the current pool (for history-only
matches, where the match has no pool sample, that is where it came from).

The files are canonical JSON lines (sorted keys): same index, inputs and config give
byte-identical files. The folder appears atomically.
"""

from near_dedup_core.formats.report import (
    FILES,
    FORMAT,
    FORMAT_VERSION,
    VERSIONS,
    DecisionRow,
    OriginRow,
    RelationRow,
    ReportManifest,
    SampleKey,
    decision_rows,
    origin_rows,
    relation_rows,
)
from near_dedup_core.report.counts import (
    HISTOGRAM_BINS,
    REASONS,
    Tally,
    bin_labels,
    count_decisions,
    decision_summary,
    jaccard_bin,
    jaccard_edges,
    jaccard_histogram,
)
from near_dedup_core.report.verify import (
    EXCLUDE_REASONS,
    KEEP_REASONS,
    ReportSummary,
    SampleDecision,
    iter_decisions,
    load_manifest,
    report_manifest,
    verify_report,
)

__all__ = ["EXCLUDE_REASONS", "FILES", "FORMAT", "FORMAT_VERSION", "HISTOGRAM_BINS",
           "KEEP_REASONS", "REASONS", "DecisionRow", "OriginRow", "RelationRow",
           "ReportManifest", "ReportSummary", "SampleDecision", "SampleKey", "Tally",
           "bin_labels", "count_decisions", "decision_rows", "decision_summary",
           "iter_decisions", "jaccard_bin", "jaccard_edges", "jaccard_histogram",
           "load_manifest", "origin_rows", "relation_rows", "report_manifest",
           "verify_report", "VERSIONS"]
