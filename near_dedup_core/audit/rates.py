"""Exclusion rates of a report by split, domain and package, and the release's rate rules.

The exclusion rate of a group is ``excluded / samples`` over the report's decisions of the
samples in that group (retained-split samples count as samples that are kept). Domains come
from the input packages (`sources.sample_domains`); samples of an unavailable package count
with domain None.

Two rules flag a day whose deduplication removed suspiciously much:

- **max exclusion rate**: a domain or a package loses more than ``max_rate`` of its samples
  (a source that suddenly became copies of earlier data, a broken scraper, a threshold too
  low for templated text);
- **max rate jump**: a domain's exclusion rate is more than ``max_jump`` (absolute, 0.2 =
  20 points) above its rate in the previous day's report. Domains absent the day before
  are not compared. Packages are not compared across days because each day's packages are
  new ones.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from near_dedup_core.audit.sources import Domains, report_inputs, sample_domains
from near_dedup_core.formats.report import DecisionRow, ReportManifest, decision_rows
from near_dedup_core.report import report_manifest

DEFAULT_MAX_EXCLUSION_RATE = 0.5
DEFAULT_MAX_RATE_JUMP = 0.2


@dataclass
class Tally:
    samples: int = 0
    keep: int = 0
    exclude: int = 0

    @property
    def rate(self) -> float:
        return self.exclude / self.samples if self.samples else 0.0

    def add(self, decision: str) -> None:
        self.samples += 1
        if decision == "exclude":
            self.exclude += 1
        else:
            self.keep += 1

    def to_json(self) -> dict:
        return {"samples": self.samples, "keep": self.keep, "exclude": self.exclude,
                "exclusion_rate": round(self.rate, 6)}


@dataclass
class ReportCounts:
    """Decisions of one report tallied by split, domain and package."""

    by_split: dict[str, Tally] = field(default_factory=lambda: defaultdict(Tally))
    by_domain: dict[str | None, Tally] = field(default_factory=lambda: defaultdict(Tally))
    by_package: dict[str, Tally] = field(default_factory=lambda: defaultdict(Tally))
    total: Tally = field(default_factory=Tally)
    missing_packages: list[str] = field(default_factory=list)

    def add(self, d: DecisionRow, domain: str | None) -> None:
        self.by_split[d.split].add(d.decision)
        self.by_domain[domain].add(d.decision)
        self.by_package[d.package_id].add(d.decision)
        self.total.add(d.decision)


def report_domains(report: str | Path, manifest: ReportManifest | None = None) -> Domains:
    manifest = report_manifest(report)[0] if manifest is None else manifest
    return sample_domains(report_inputs(manifest, report))


def count_report(report: str | Path, domains: Domains | None = None) -> ReportCounts:
    """Stream a report's decisions into per-split/domain/package tallies."""
    domains = report_domains(report) if domains is None else domains
    counts = ReportCounts(missing_packages=[p.package_id for p in domains.missing])
    for _, d in decision_rows(Path(report)):
        counts.add(d, domains.of(d.key))
    return counts


class RateProblem(NamedTuple):
    """A group that breaks a rule: ``rule`` is "max_exclusion_rate" or "max_rate_jump"."""

    group: str  # "domain" or "package"
    name: str | None
    rule: str
    rate: float
    previous_rate: float | None
    samples: int
    excluded: int

    def describe(self) -> str:
        label = f"{self.group} {self.name if self.name is not None else '(none)'}"
        if self.rule == "max_rate_jump":
            return (f"{label}: exclusion rate {self.rate:.1%} ({self.excluded:,} of "
                    f"{self.samples:,}), up from {self.previous_rate:.1%} the day before")
        return f"{label}: exclusion rate {self.rate:.1%} ({self.excluded:,} of {self.samples:,})"


def rate_problems(current: ReportCounts, previous: ReportCounts | None, max_rate: float,
                  max_jump: float) -> list[RateProblem]:
    """Groups of ``current`` that break the rules (see the module docstring)."""
    problems = []
    for group, table in (("domain", current.by_domain), ("package", current.by_package)):
        for name, t in _sorted(table.items()):
            if t.samples and t.rate > max_rate:
                problems.append(RateProblem(group, name, "max_exclusion_rate", t.rate, None,
                                            t.samples, t.exclude))
    if previous is not None:
        for name, t in _sorted(current.by_domain.items()):
            before = previous.by_domain.get(name)
            if t.samples and before is not None and before.samples \
                    and t.rate - before.rate > max_jump:
                problems.append(RateProblem("domain", name, "max_rate_jump", t.rate,
                                            before.rate, t.samples, t.exclude))
    return problems


def _sorted(items: Iterable[tuple[str | None, Tally]]) -> list[tuple[str | None, Tally]]:
    return sorted(items, key=lambda kv: (kv[0] is None, kv[0] or ""))
