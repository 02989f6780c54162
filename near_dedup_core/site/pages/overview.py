"""The overview page (``index.html``): the report's counts by split, reason, domain and
package, the Jaccard histogram, the rate findings, the inputs and the config."""

from __future__ import annotations

from near_dedup_core.audit.rates import (
    DEFAULT_MAX_EXCLUSION_RATE,
    DEFAULT_MAX_RATE_JUMP,
    ReportCounts,
)
from near_dedup_core.report import REASONS
from near_dedup_core.site import views
from near_dedup_core.site.model import SiteData
from near_dedup_core.site.render import Writer


def write(w: Writer, data: SiteData, counts: ReportCounts, findings, compared: bool,
              notes: list[str]) -> None:
    m = data.manifest
    c = m.counts
    split_rows = [(s, v.keep, v.exclude) for s, v in sorted(c.by_split.items())]
    reason_rows = sorted(c.by_reason.items())

    def tally_rows(table: dict) -> list[tuple[str, int, int, float]]:
        items = sorted(table.items(), key=lambda kv: (kv[0] is None, kv[0] or ""))
        return [("(unknown)" if k is None else str(k), t.keep, t.exclude, t.rate)
                for k, t in items]

    domain_rows = tally_rows(counts.by_domain)
    package_rows = tally_rows(counts.by_package)
    threshold = m.config.threshold
    w.page("index.html", "overview.html", title="Overview", counts=c,
           split_rows=split_rows, split_chart=views.bar_chart(split_rows),
           reason_rows=reason_rows,
           reason_chart=views.bar_chart([(r, n if REASONS.get(r, ("keep",))[0] == "keep"
                                          else 0, n if REASONS.get(r, ("keep",))[0] ==
                                          "exclude" else 0) for r, n in reason_rows]),
           domain_rows=domain_rows,
           domain_chart=views.bar_chart([r[:3] for r in domain_rows]),
           package_rows=package_rows,
           package_chart=views.bar_chart([r[:3] for r in package_rows]),
           hist=views.histogram_chart(data.relations.near_jaccards, threshold),
           manifest_hist=sorted(c.near_relations_jaccard.items()),
           threshold=threshold, findings=findings, compared=compared,
           max_rate=DEFAULT_MAX_EXCLUSION_RATE, max_jump=DEFAULT_MAX_RATE_JUMP,
           inputs=data.inputs,
           config_rows=sorted(m.config.model_dump(mode="json").items()), notes=notes,
           clusters=len(data.relations.clusters),
           history_only=data.relations.history_only)
