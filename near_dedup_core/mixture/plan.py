"""Mixture stages 1–7, the plan: open the inputs (and the reports), one validating pass
over the pool, then weights, quotas and the exact selection (`plan_mixture` → `Plan`)."""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from near_dedup_core.compare import compared_text
from near_dedup_core.contamination import (
    ContaminationView,
    read_contamination,
    recheck_for_mixture,
)
from near_dedup_core.errors import NearDedupError, where
from near_dedup_core.fsutil import is_within, write_json
from near_dedup_core.mixture.allocation import allocate, sample_rank, strategy_weights
from near_dedup_core.mixture.config import DEFAULT_RETAINED_SPLITS, MixtureConfig
from near_dedup_core.mixture.formats import FORMAT_VERSION, PLAN_FORMAT, PlanRow
from near_dedup_core.mixture.inputs import (
    ReportView,
    SampleKey,
    check_inputs_match,
    read_report,
    resolve_ref,
)
from near_dedup_core.package import ID_PATTERN, ID_RE, Package, open_packages, stream_records
from near_dedup_core.progress import Progress
from near_dedup_core.storage import fetched_folder


@dataclass
class Plan:
    """The per-domain plan and the exact samples it selects."""

    config: MixtureConfig
    packages: list[Package]
    report: ReportView | None
    retained_splits: list[str]
    rows: list[dict]
    retained_records: dict[str, int]
    selected: set[SampleKey]
    ref_of: dict[SampleKey, SampleKey] = field(repr=False)
    retained_refs: set[SampleKey] = field(repr=False)
    contamination: ContaminationView | None = None
    #: samples of retained splits the report excludes (taken down, docs/takedowns.md): left
    #: out like every excluded sample
    retained_dropped: set[SampleKey] = field(default_factory=set, repr=False)

    @property
    def removed_contaminated(self) -> int:
        return sum(r["removed_contaminated"] for r in self.rows)

    @property
    def selected_total(self) -> int:
        return sum(r["selected"] for r in self.rows)

    @property
    def shortfall(self) -> int:
        return self.config.target_records - self.selected_total

    @property
    def excluded_by_report(self) -> int:
        return sum(r["available_before_dedup"] - r["available_after_dedup"] for r in self.rows)

    def to_json(self) -> dict:
        cfg = self.config
        return {
            "format": PLAN_FORMAT,
            "format_version": FORMAT_VERSION,
            "name": cfg.name,
            "kind": cfg.kind,
            "inputs": [{"package_id": p.package_id, "manifest_sha256": p.manifest_sha256,
                        "path": path} for p, path in zip(self.packages, cfg.inputs, strict=True)],
            "strategy": cfg.strategy.model_dump(mode="json"),
            "seed": cfg.seed,
            "target_records": cfg.target_records,
            "group_by": cfg.group_by,
            "quality": cfg.quality.model_dump(mode="json"),
            "allow_shortfall": cfg.allow_shortfall,
            "redistribute": cfg.redistribute,
            "retained_splits": self.retained_splits,
            # The report by its folder's name and its manifest's digest, never by where its
            # root is mounted: a rebuild after the roots moved is byte-identical.
            "near_dedup_report": None if self.report is None else {
                "path": Path(cfg.near_dedup_report or "").name,
                "manifest_sha256": self.report.manifest_sha256,
                "excluded_pool_samples": self.excluded_by_report},
            **({} if self.contamination is None else {"contamination_report": {
                "path": cfg.contamination_report,
                "manifest_sha256": self.contamination.manifest_sha256,
                "removed_pool_samples": self.removed_contaminated}}),
            "domains": self.rows,
            "totals": {"selected": self.selected_total, "shortfall": self.shortfall,
                       "redistributed": sum(r["redistributed"] for r in self.rows)},
            "retained_records": self.retained_records,
        }

    def write(self, path: Path) -> None:
        """Write plan.json (key-sorted, stable) through a temporary sibling, linked into
        place only if nothing is at ``path`` (`require_new_plan`): a plan is never
        replaced, not even by another run that wrote it meanwhile."""
        path = Path(path)
        require_new_plan(path)
        for p in self.packages:
            if isinstance(p.path, Path) and is_within(path, p.path):
                raise NearDedupError(f"plan output {path} is inside input package "
                                     f"{p.package_id}; packages are immutable")
        if self.report is not None and is_within(path, self.report.path):
            raise NearDedupError(f"plan output {path} is inside the near-dedup report")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        try:
            write_json(tmp, self.to_json())
            os.link(tmp, path)  # fails if the name exists: never a replacement
        except FileExistsError:
            raise NearDedupError(f"plan output {path} already exists; choose a new "
                                 f"file") from None
        finally:
            tmp.unlink(missing_ok=True)

    def table(self) -> str:
        cfg = self.config
        head = (f"mixture {cfg.name} ({cfg.kind}): strategy {cfg.strategy_label()}, "
                f"seed {cfg.seed}, target {cfg.target_records:,} records, group by "
                f"{cfg.group_by}, quality min_chars {cfg.quality.min_chars}")
        if self.report is None:
            rep = "near-dedup report: none (plain mixture)"
        else:
            rep = (f"near-dedup report {cfg.near_dedup_report}: {self.excluded_by_report:,} "
                   f"pool samples excluded before quotas")
        if self.contamination is not None:
            rep += (f"\ncontamination report {cfg.contamination_report}: "
                    f"{self.removed_contaminated:,} pool samples removed (contain eval items)")
        cols = ["domain", "before dedup", "after dedup", "contaminated", "eligible", "weight",
                "quota", "redistributed", "selected", "shortfall"]
        body = [[r["domain"], f"{r['available_before_dedup']:,}",
                 f"{r['available_after_dedup']:,}", f"{r['removed_contaminated']:,}",
                 f"{r['eligible']:,}",
                 f"{r['weight']:.4f}", f"{r['quota']:,}", f"{r['redistributed']:,}",
                 f"{r['selected']:,}", f"{r['shortfall']:,}"] for r in self.rows]
        total = ["total", f"{sum(r['available_before_dedup'] for r in self.rows):,}",
                 f"{sum(r['available_after_dedup'] for r in self.rows):,}",
                 f"{self.removed_contaminated:,}",
                 f"{sum(r['eligible'] for r in self.rows):,}",
                 f"{sum(r['weight'] for r in self.rows):.4f}",
                 f"{cfg.target_records:,}",
                 f"{sum(r['redistributed'] for r in self.rows):,}",
                 f"{self.selected_total:,}", f"{self.shortfall:,}"]
        grid = [cols, *body, total]
        widths = [max(len(row[i]) for row in grid) for i in range(len(cols))]

        def fmt(row: list[str]) -> str:
            return "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                             for i, (c, w) in enumerate(zip(row, widths, strict=False))).rstrip()

        lines = [head, rep, fmt(cols), fmt(["-" * w for w in widths])]
        lines += [fmt(r) for r in body]
        lines += [fmt(["-" * w for w in widths]), fmt(total)]
        kept = ", ".join(f"{s} {n:,}" for s, n in sorted(self.retained_records.items()))
        lines.append(f"retained splits ({', '.join(self.retained_splits) or 'none'}), copied "
                     f"whole: {kept or 'no records'}")
        if self.shortfall:
            lines.append(f"shortfall: {self.shortfall:,} of {cfg.target_records:,} records "
                         f"(allowed by allow_shortfall)")
        return "\n".join(lines)


def require_new_plan(path: str | Path) -> None:
    """Refuse a plan output that is a URL (a plan is a local file; a mixture on object
    storage holds its own plan.json) or that exists (outputs are never replaced)."""
    from near_dedup_core.storage import is_url

    if is_url(path):
        raise NearDedupError(f"plan output {path}: mixture plan --output writes a local file "
                             f"only; mixture build --output writes the plan into the mixture, "
                             f"on object storage too")
    path = Path(path)
    if path.is_dir():
        raise NearDedupError(f"plan output {path} is a directory")
    if path.exists() or path.is_symlink():
        raise NearDedupError(f"plan output {path} already exists; choose a new file")


def _open_inputs(cfg: MixtureConfig) -> list[Package]:
    """Open the input packages; their kind must be the mixture's and every split name must
    be usable as the folder ``data/<split>/`` of the mixture."""
    packages = open_packages(cfg.inputs)
    for p in packages:
        if p.kind != cfg.kind:
            raise NearDedupError(f"{where(p.package_id)}: kind {p.kind} but the mixture "
                                 f"{cfg.name} is {cfg.kind}")
        for split in p.splits:
            if not ID_RE.fullmatch(split) or split in (".", ".."):
                raise NearDedupError(f"{where(p.package_id, 'manifest.json')}: split name "
                                     f"{split!r} cannot name a mixture folder "
                                     f"({ID_PATTERN})")
    return packages


def _retained_splits(cfg: MixtureConfig, report: ReportView | None) -> list[str]:
    if report is None:
        return list(cfg.retained_splits if cfg.retained_splits is not None
                    else DEFAULT_RETAINED_SPLITS)
    theirs = report.retained_splits
    if cfg.retained_splits is not None and sorted(cfg.retained_splits) != sorted(theirs):
        raise NearDedupError(f"mixture {cfg.name}: retained_splits {cfg.retained_splits} "
                             f"differ from the near-dedup report's {theirs}; the report "
                             f"decides which splits are retained")
    return theirs


@dataclass
class _PoolScan:
    """What one pass over the inputs learns: per-domain counts and the eligible samples."""

    before: Counter[str] = field(default_factory=Counter)
    after: Counter[str] = field(default_factory=Counter)
    contaminated: Counter[str] = field(default_factory=Counter)
    candidates: dict[str, list[tuple[bytes, SampleKey]]] = field(
        default_factory=lambda: defaultdict(list))  # domain → (rank, sample), eligible only
    retained_records: Counter[str] = field(default_factory=Counter)
    ref_of: dict[SampleKey, SampleKey] = field(default_factory=dict)
    retained_refs: set[SampleKey] = field(default_factory=set)
    retained_dropped: set[SampleKey] = field(default_factory=set)


def _scan_pool(cfg: MixtureConfig, packages: list[Package], retained: set[str],
               excluded: set[SampleKey], progress: bool,
               contaminated: frozenset[SampleKey] = frozenset()) -> _PoolScan:
    """One validating pass: domains (refs resolved), dedup drops, quality, selection ranks."""
    scan = _PoolScan()
    depended = {d for p in packages for d in p.depends_on}
    # Records that other packages reference: their group value and compared-text length.
    slim: dict[SampleKey, tuple[dict, int]] = {}
    bar = Progress("mixture: reading inputs", sum(p.record_count for p in packages),
                   enabled=progress)
    for rec in stream_records(packages):
        bar.advance()
        key = (rec.package_id, rec.sample_id)
        if "origin" in rec.data:
            raise NearDedupError(f"{where(rec.package_id, rec.file, rec.line)}: field "
                                 f"'origin' is reserved for the mixture's origin reference")
        if rec.ref is not None:
            # stream_records checked that the ref resolves into a depends_on package.
            scan.ref_of[key] = rec.ref
            target, chars = slim[rec.ref]
            resolved = resolve_ref(rec.data, target)
        else:
            resolved = rec.data
            chars = len(compared_text(cfg.kind, resolved))
        if rec.package_id in depended:
            value = resolved.get(cfg.group_by)
            slim[key] = ({} if value is None else {cfg.group_by: value}), chars
        if rec.split in retained:
            if key in excluded:  # only a takedown excludes a sample of a retained split
                scan.retained_dropped.add(key)
                continue
            scan.retained_records[rec.split] += 1
            if rec.ref is not None:
                scan.retained_refs.add(key)
            continue
        value = resolved.get(cfg.group_by)
        if not isinstance(value, str) or not value:
            raise NearDedupError(f"{where(rec.package_id, rec.file, rec.line)}: group_by field "
                                 f"{cfg.group_by!r} is missing or not a non-empty string")
        scan.before[value] += 1
        if key in excluded:
            continue
        scan.after[value] += 1
        if key in contaminated:
            scan.contaminated[value] += 1
            continue
        if chars >= cfg.quality.min_chars:
            scan.candidates[value].append((sample_rank(cfg.seed, *key), key))
    bar.finish()
    return scan


def plan_mixture(cfg: MixtureConfig, *, progress: bool = True) -> Plan:
    """Read the inputs (and the report), compute the per-domain plan and the selection.

    Raises NearDedupError for a stale or broken report, invalid inputs, and a shortfall
    that ``allow_shortfall`` does not permit.
    """
    packages = _open_inputs(cfg)
    report = None
    if cfg.near_dedup_report is not None:
        report = read_report(fetched_folder(cfg.near_dedup_report))
        kinds: set[str] = {i["kind"] for i in report.inputs}  # validated: always present
        if kinds - {cfg.kind}:
            raise NearDedupError(f"near_dedup_report {report.path} covers {sorted(kinds)} "
                                 f"packages but the mixture {cfg.name} is {cfg.kind}")
        check_inputs_match(packages, report)
    contamination = None
    if cfg.contamination_report is not None:
        contamination = read_contamination(fetched_folder(cfg.contamination_report))
        check_inputs_match(packages, contamination)  # type: ignore[arg-type]
        recheck_for_mixture(contamination, packages, cfg.kind)
    retained = _retained_splits(cfg, report)
    scan = _scan_pool(cfg, packages, set(retained),
                      report.excluded if report is not None else set(), progress,
                      frozenset(contamination.contaminated) if contamination else frozenset())

    available = {d: scan.after.get(d, 0) - scan.contaminated.get(d, 0) for d in scan.before}
    weights = strategy_weights(cfg, available)
    eligible = {d: len(c) for d, c in scan.candidates.items()}
    quota, selected_n = allocate(cfg.target_records, weights, eligible, cfg.redistribute)
    rows = []
    selected: set[SampleKey] = set()
    for domain in sorted(weights):
        own = min(quota[domain], eligible.get(domain, 0))
        rows.append(PlanRow(domain=domain, available_before_dedup=scan.before.get(domain, 0),
                            available_after_dedup=scan.after.get(domain, 0),
                            eligible=eligible.get(domain, 0), weight=weights[domain],
                            quota=quota[domain], redistributed=selected_n[domain] - own,
                            selected=selected_n[domain],
                            shortfall=quota[domain] - own,
                            removed_contaminated=scan.contaminated.get(domain, 0)).model_dump())
        ranked = sorted(scan.candidates.get(domain, ()))
        selected.update(key for _, key in ranked[:selected_n[domain]])

    plan = Plan(config=cfg, packages=packages, report=report, retained_splits=retained,
                rows=rows, retained_records=dict(sorted(scan.retained_records.items())),
                selected=selected, ref_of=scan.ref_of, retained_refs=scan.retained_refs,
                contamination=contamination, retained_dropped=scan.retained_dropped)
    if plan.shortfall and not cfg.allow_shortfall:
        short = ", ".join(f"{r['domain']} {r['eligible']:,} eligible for quota {r['quota']:,}"
                          for r in rows if r["shortfall"])
        how = "after redistribution" if cfg.redistribute else "(redistribute is off)"
        raise NearDedupError(
            f"mixture {cfg.name}: {plan.shortfall:,} of {cfg.target_records:,} records short "
            f"{how} ({short}); set allow_shortfall: true to record the shortfall, or lower "
            f"target_records")
    return plan
