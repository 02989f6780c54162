"""The release's audit views: a day's report compared with the previous release day's, and the
exclusion-rate check. Thin: the work is `near_dedup_core.audit`.

The previous release day is the latest earlier partition whose report folder exists (a day
released with near-dedup off, or not released, is skipped).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import dagster as dg

from near_dedup_core import audit
from near_dedup_core.errors import NearDedupError
from near_dedup_core.storage import Location

from near_dedup_assets.locations import checked, location_value
from near_dedup_assets.resources import ReleaseSettings
from near_dedup_assets.summaries import md_table, rate_key


def previous_report(release: ReleaseSettings, day: str, days: Sequence[str]) -> Location | None:
    for earlier in sorted((d for d in days if d < day), reverse=True):
        path = release.report_dir(earlier)
        if path.exists("manifest.json"):
            return path
    return None


def comparison_metadata(report: Path, previous: Location | None) -> dict:
    """`report diff` of the local folder ``report`` against the previous day's report:
    counts and a small table."""
    if previous is None:
        return {"previous_day": dg.MetadataValue.text("none: first release day")}
    try:
        diff = checked(previous, lambda folder: audit.diff_reports(folder, report))
    except NearDedupError as exc:  # yesterday's report is unreadable: today's is still fine
        return {"previous_day": location_value(previous),
                "vs_previous": dg.MetadataValue.text(f"no comparison: {exc}")}
    total = diff.counts["total"]
    rows = [[r["domain"] if r["domain"] is not None else "(unknown)",
             f"{100 * r['old']['exclusion_rate']:.1f}%", f"{100 * r['new']['exclusion_rate']:.1f}%",
             r["newly_excluded"], r["newly_kept"], r["changed_kept"]]
            for r in diff.counts["by_domain"]]
    return {
        "previous_day": location_value(previous),
        "vs_previous_config_changed": dg.MetadataValue.bool(diff.config_changed["changed"]),
        "vs_previous_newly_excluded": dg.MetadataValue.int(total["newly_excluded"]),
        "vs_previous_newly_kept": dg.MetadataValue.int(total["newly_kept"]),
        "vs_previous_changed_kept": dg.MetadataValue.int(total["changed_kept"]),
        "vs_previous_only_new": dg.MetadataValue.int(total["only_new"]),
        "vs_previous_new_history_only": dg.MetadataValue.int(
            diff.counts["relations"]["new_history_only"]),
        "vs_previous": dg.MetadataValue.md(md_table(
            ["domain", "excluded % before", "excluded % now", "newly excluded", "newly kept",
             "changed kept"], rows)),
    }


def exclusion_rate_result(release: ReleaseSettings, day: str, days: Sequence[str],
                          severity: dg.AssetCheckSeverity) -> dg.AssetCheckResult:
    """Domains and packages that lost too much of their samples, or domains whose rate
    jumped since the previous release day (`audit.rate_problems`).

    Each domain's rate of the day is a float under `rate_key`, so the check's history plots
    it over the days; the limits are text (they are settings, not measurements)."""
    max_rate, max_jump = release.exclusion_rate_limit, release.rate_jump_limit
    report = release.report_dir(day)
    previous = previous_report(release, day, days)
    current = checked(report, audit.count_report)
    before = checked(previous, audit.count_report) if previous is not None else None
    problems = audit.rate_problems(current, before, max_rate, max_jump)
    rows = [[name if name is not None else "(unknown)", t.samples, t.exclude,
             f"{100 * t.rate:.1f}%",
             f"{100 * before.by_domain[name].rate:.1f}%"
             if before is not None and name in before.by_domain else "-"]
            for name, t in sorted(current.by_domain.items(), key=lambda kv: str(kv[0]))]
    metadata: dict[str, dg.MetadataValue] = {
        rate_key(name): dg.MetadataValue.float(round(t.rate, 6))
        for name, t in sorted(current.by_domain.items(), key=lambda kv: str(kv[0]))}
    metadata |= {
        "day": dg.MetadataValue.text(day),
        "max_exclusion_rate": dg.MetadataValue.text(f"{100 * max_rate:g}%"),
        "max_rate_jump": dg.MetadataValue.text(f"{100 * max_jump:g} points"),
        "previous_day": dg.MetadataValue.text(str(previous) if previous else "none"),
        "domains": dg.MetadataValue.md(md_table(
            ["domain", "samples", "excluded", "excluded %", "the day before"], rows)),
        "offending": dg.MetadataValue.md(md_table(
            ["group", "name", "rule", "rate", "the day before"],
            [[p.group, p.name if p.name is not None else "(unknown)", p.rule,
              f"{100 * p.rate:.1f}%",
              f"{100 * p.previous_rate:.1f}%" if p.previous_rate is not None else "-"]
             for p in problems])) if problems else dg.MetadataValue.text("none"),
    }
    if current.missing_packages:
        metadata["domains_unknown_for"] = dg.MetadataValue.text(
            ", ".join(current.missing_packages))
    description = ("; ".join(p.describe() for p in problems) if problems else
                   f"no domain or package above {max_rate:.0%} excluded, no domain up by more "
                   f"than {100 * max_jump:.0f} points")
    return dg.AssetCheckResult(passed=not problems, severity=severity, description=description,
                               metadata=metadata)
