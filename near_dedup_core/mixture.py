"""Mixture plan, build and verify: a per-domain sample of snapshot packages, optionally
filtered by a frozen near-dedup report (SPEC §5).

Config. A JSON object validated by `MixtureConfig` (unknown keys refused). Relative paths in
``inputs`` and ``near_dedup_report`` are relative to the current working directory, and are
recorded in the mixture exactly as written.

Pools. Samples of the *retained splits* are copied whole; every other split forms the
sampling pool (the report's "train pool"), and selected samples keep their split. The
report's inputs must be exactly the mixture's inputs (package ids and manifest sha256s, in
any order), else the report is stale and must be rescanned. With a report the retained splits are the report config's
``retained_splits`` (a mixture config may repeat them, but not differ); without a report they
are the config's optional ``retained_splits``, default ``["validation"]``.

Order of work (same with and without a report):
1. ``available_before_dedup``: pool samples per domain (the record's ``group_by`` field).
2. Drop the pool samples the report excludes → ``available_after_dedup`` (no report: equal).
3. Weights. ``fixed`` (and ``doremi``/``regmix``, which carry externally learned weights):
   w_i = weights[i] / Σ weights, domains not named get 0. ``temperature`` T:
   w_i ∝ n_i^(1/T) with n_i = available_after_dedup.
4. Quotas: ``target_records × w_i`` rounded by largest remainder (ties by domain name), so
   they sum to ``target_records`` exactly (computed on exact fractions of the float weights).
5. Quality: a sample is *eligible* when its compared text has at least ``quality.min_chars``
   characters (CPT ``text``; SFT ``"\\n".join(f"{role}: {content}")`` over ``messages``).
   A sample the report keeps is still subject to quota and quality.
6. Each domain takes ``min(quota, eligible)``. With ``redistribute`` the unmet remainder
   goes to domains with spare eligible samples and weight > 0, in proportion to their
   weights (largest remainder, capped by the spare), repeated until met or no spare is left.
   Row ``shortfall`` is the part of a domain's own quota its records could not fill;
   ``redistributed`` is the quota it received from others; the plan's total shortfall is
   ``target_records − Σ selected``. A total shortfall is an error unless ``allow_shortfall``.
7. Selection inside a domain: eligible samples ranked by
   ``sha256(f"{seed}:{package_id}:{sample_id}")``, the first ones taken — deterministic for a
   seed and independent of file order.

``plan.json`` (format ``mixture-plan``) holds the config's mixing parameters, the report
identity and one object per domain under ``domains`` (`PlanRow`: domain,
available_before_dedup, available_after_dedup, eligible, weight, quota, redistributed,
selected, shortfall), sorted by domain.

``doremi``/``regmix`` weights were learned on the undeduplicated pool, so they are refused
together with ``near_dedup_report``: applying them to the filtered pool would present old
weights as if learned on it.

Mixture package (``format: "mixture-package"``, ``format_version`` 1)::

    manifest.json        name, kind, inputs [{package_id, manifest_sha256, path}], strategy,
                         seed, target_records, group_by, quality, allow_shortfall,
                         redistribute, retained_splits, counts, near_dedup_report
                         ({path: "near-dedup", manifest_sha256} or null),
                         files [{path, split, records, sha256}], tool_version
    data/<split>/part-00000.jsonl
    plan.json            the plan (`Plan.to_json`)
    near-dedup/          byte-identical copy of the report (with a report only)
    checksums.sha256     over every other file, ``sha256sum -c`` format

A data line is the original record with refs resolved — the referenced record's fields,
then the ref record's own ``id`` and its own ``domain``/``source`` if present — plus
``"origin": {"package_id", "sample_id"}`` naming the sample itself; canonical JSON
(`fsutil.json_line`), in input package order then position in the package.

`verify_mixture` needs only the mixture folder: no input package and no SQLite index. It
checks the canonical checksums over plain files (the embedded report through
`report.verify_report`), manifest and plan with strict types, each data file against its
``files[]`` sha256 and record count, the plan recomputed from its own counts, and with a
report: inputs equal the report's inputs, every line's sample is a ``keep`` decision of its
split whose ``text_sha256`` the record's text matches, retained splits are complete. A plain
mixture has no decisions to check its records against; its own counts are checked. What the
files can and cannot prove: docs/tamper.md.

Contamination. ``contamination_report`` names a frozen contamination report
(contamination.py) whose ``inputs`` must equal the mixture inputs like the near-dedup
report's. After the dedup drop (step 2), pool samples the report lists as containing an
eval item are removed too (plan field ``removed_contaminated``; ``available_after_dedup``
counts before this removal, weights use what is left); retained splits are untouched. The
built mixture holds a byte-identical copy under ``contamination/`` (manifest
``contamination_report``: {path, manifest_sha256}), and `verify_mixture` re-checks that
copy and that no selected line is a contaminated sample.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

from near_dedup_core import __version__
from near_dedup_core.compare import compared_text
from near_dedup_core.contamination import (ContaminationView, copy_report as copy_contamination,
                                           read_contamination)
from near_dedup_core.config import validate_model
from near_dedup_core.errors import NearDedupError, where
from near_dedup_core.fsutil import (
    iter_json_objects,
    read_json_object,
    read_model,
    CHECKSUMS,
    atomic_dir,
    is_within,
    require_new_output,
    json_line,
    sha256_file,
    verify_checksums,
    write_checksums,
    write_json,
)
from near_dedup_core.package import ID_PATTERN, ID_RE, Package, open_packages, stream_records
from near_dedup_core.progress import Progress
from near_dedup_core.report import SampleDecision, verify_report

FORMAT = "mixture-package"
FORMAT_VERSION = 1
PLAN_FORMAT = "mixture-plan"
REPORT_DIR = "near-dedup"
CONTAMINATION_DIR = "contamination"
DEFAULT_RETAINED_SPLITS = ("validation",)
#: Fields of a ref record that override the referenced record's fields when resolving.
REF_OWN_FIELDS = ("id", "domain", "source")

SampleKey = tuple[str, str]  # (package_id, sample_id)

# --------------------------------------------------------------------------- config

Weight = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]


class _Weights(BaseModel):
    """Explicit per-domain weights; normalized by their sum, which must be positive."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    weights: dict[str, Weight] = Field(min_length=1)

    @model_validator(mode="after")
    def _positive_sum(self) -> "_Weights":
        if sum(self.weights.values()) <= 0:
            raise ValueError("weights must not all be 0")
        return self


class FixedStrategy(_Weights):
    """Weights given by the config."""

    type: Literal["fixed"]


class LearnedStrategy(_Weights):
    """Weights learned elsewhere (DoReMi, RegMix) on a given pool; used like fixed weights."""

    type: Literal["doremi", "regmix"]


class TemperatureStrategy(BaseModel):
    """w_i ∝ n_i^(1/T): T = 1 is proportional to size, larger T flattens towards uniform."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    type: Literal["temperature"]
    temperature: float = Field(gt=0.0, allow_inf_nan=False)


Strategy = Annotated[Union[FixedStrategy, TemperatureStrategy, LearnedStrategy],
                     Field(discriminator="type")]


class QualityFilter(BaseModel):
    """Per-sample quality filters applied after dedup, before selection."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    min_chars: int = Field(0, ge=0)


class MixtureConfig(BaseModel):
    """A mixture config file (SPEC §5)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str = Field(pattern=f"^{ID_PATTERN}$")
    kind: Literal["cpt", "sft"]
    inputs: list[str] = Field(min_length=1)
    target_records: int = Field(ge=1)
    group_by: str = Field("domain", min_length=1)
    strategy: Strategy
    quality: QualityFilter = Field(default_factory=QualityFilter)
    allow_shortfall: bool = False
    redistribute: bool = False
    seed: int = Field(0, ge=0)
    near_dedup_report: str | None = None
    contamination_report: str | None = None
    retained_splits: list[str] | None = None

    @model_validator(mode="after")
    def _learned_weights_need_the_undeduplicated_pool(self) -> "MixtureConfig":
        if self.near_dedup_report is not None and self.strategy.type in ("doremi", "regmix"):
            raise ValueError(
                f"strategy {self.strategy.type} cannot be combined with near_dedup_report: its "
                f"weights were learned on the undeduplicated pool and would be applied to a "
                f"different, deduplicated one; use fixed or temperature, or drop the report")
        return self

    def strategy_label(self) -> str:
        if isinstance(self.strategy, TemperatureStrategy):
            return f"temperature T={self.strategy.temperature:g}"
        return self.strategy.type


def load_mixture_config(path: str | Path) -> MixtureConfig:
    """Read and validate a mixture config; every error is one line naming the file."""
    path = Path(path)
    raw = read_json_object(path, "mixture config")
    if "name" not in raw and "inputs" not in raw:
        raise NearDedupError(f"mixture config {path}: no name and no inputs: a daily-release "
                             f"template (NEAR_DEDUP_MIXTURE_TEMPLATE), completed per day by the "
                             f"release; give the CLI a full config such as "
                             f"config/mixture-example.json")
    return validate_model(MixtureConfig, raw, f"mixture config {path}")


# --------------------------------------------------------------------------- weights, quotas

def strategy_weights(cfg: "MixtureConfig | FixedStrategy | TemperatureStrategy | LearnedStrategy",
                     available: dict[str, int]) -> dict[str, float]:
    """Normalized weight per domain (every domain of ``available`` and of fixed weights), for
    a config or its strategy alone (as recorded in plan.json)."""
    strategy = cfg.strategy if isinstance(cfg, MixtureConfig) else cfg
    if isinstance(strategy, TemperatureStrategy):
        raw = {d: (n ** (1.0 / strategy.temperature) if n > 0 else 0.0)
               for d, n in available.items()}
    else:
        raw = {d: 0.0 for d in available}
        raw.update(strategy.weights)
    total = math.fsum(raw.values())
    if total <= 0:
        return {d: 0.0 for d in raw}
    return {d: w / total for d, w in raw.items()}


def largest_remainder(total: int, weights: dict[str, float]) -> dict[str, int]:
    """Split ``total`` in proportion to ``weights`` into integers summing to ``total``.

    Each domain gets ``floor(total × w / Σw)``; the remaining units go to the largest
    fractional parts (ties by domain name). Exact arithmetic on the float weights, so the
    result does not depend on summation order. All-zero weights give all zeros.
    """
    exact = {d: Fraction(w) for d, w in weights.items() if w > 0}
    out = {d: 0 for d in weights}
    weight_sum = sum(exact.values())
    if not exact or total <= 0:
        return out
    shares = {d: total * w / weight_sum for d, w in exact.items()}
    for d, s in shares.items():
        out[d] = math.floor(s)
    left = total - sum(out.values())
    for d in sorted(shares, key=lambda d: (-(shares[d] - out[d]), d))[:left]:
        out[d] += 1
    return out


def allocate(target: int, weights: dict[str, float], eligible: dict[str, int],
             redistribute: bool) -> tuple[dict[str, int], dict[str, int]]:
    """Return (quota, selected) per domain; see the module docstring, steps 4 and 6."""
    quota = largest_remainder(target, weights)
    selected = {d: min(quota[d], eligible.get(d, 0)) for d in weights}
    unmet = target - sum(selected.values())
    while redistribute and unmet > 0:
        spare = {d: eligible.get(d, 0) - selected[d] for d in weights
                 if weights[d] > 0 and eligible.get(d, 0) > selected[d]}
        if not spare:
            break
        share = largest_remainder(unmet, {d: weights[d] for d in spare})
        for d, n in share.items():
            give = min(n, spare[d])
            selected[d] += give
            unmet -= give
    return quota, selected


def sample_rank(seed: int, package_id: str, sample_id: str) -> bytes:
    """Selection order inside a domain: lower ranks are taken first."""
    return hashlib.sha256(f"{seed}:{package_id}:{sample_id}".encode()).digest()


# --------------------------------------------------------------------------- records

def resolve_ref(own: dict, target: dict) -> dict:
    """The referenced record's fields, then the ref record's own id/domain/source."""
    resolved = {k: v for k, v in target.items() if k != "ref"}
    for key in REF_OWN_FIELDS:
        if key in own:
            resolved[key] = own[key]
    return resolved


# --------------------------------------------------------------------------- report access

@dataclass(frozen=True)
class ReportView:
    """What a mixture needs from a frozen report: identity, inputs and exclusions."""

    path: Path
    manifest_sha256: str
    checksums_sha256: str  # pins every file of the report as it was read
    manifest: dict
    excluded: set[SampleKey]  # pool samples the report excludes

    @property
    def inputs(self) -> list[dict]:
        return self.manifest["inputs"]

    @property
    def retained_splits(self) -> list[str]:
        return list(self.manifest["config"]["retained_splits"])


def read_report(path: Path, label: str = "near_dedup_report") -> ReportView:
    """Verify a report folder (`report.verify_report`) and load its manifest and exclusions."""
    if not (path / "manifest.json").is_file():
        raise NearDedupError(f"{label} {path}: not a near-dedup report (no manifest.json)")
    verified = verify_report(path)
    manifest = verified.manifest  # validated against report.ReportManifest
    excluded = {key for key, d in verified.samples.items() if d.decision == "exclude"}
    return ReportView(path=path, manifest_sha256=sha256_file(path / "manifest.json"),
                      checksums_sha256=sha256_file(path / CHECKSUMS), manifest=manifest,
                      excluded=excluded)


def check_inputs_match(packages: list[Package], report: ReportView) -> None:
    """The mixture inputs must be exactly the report's input pool, else the report is stale."""
    mine = {p.package_id: p.manifest_sha256 for p in packages}
    theirs = {i["package_id"]: i["manifest_sha256"] for i in report.inputs}
    hint = f"the report {report.path} is stale: rescan with the mixture inputs"
    for pid, sha in mine.items():
        if pid not in theirs:
            raise NearDedupError(f"package {pid} is not among the report's inputs; {hint}")
        if theirs[pid] != sha:
            raise NearDedupError(f"package {pid}: manifest sha256 {sha[:12]}… differs from "
                                 f"the report's {theirs[pid][:12]}…; {hint}")
    for pid in theirs:
        if pid not in mine:
            raise NearDedupError(f"report input package {pid} is not among the mixture "
                                 f"inputs; {hint}")


# --------------------------------------------------------------------------- plan

class PlanRow(BaseModel):
    """One domain of a plan (module docstring, steps 1–6)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    domain: str
    available_before_dedup: int
    available_after_dedup: int
    eligible: int
    weight: float
    quota: int
    redistributed: int
    selected: int
    shortfall: int
    removed_contaminated: int = 0


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
                        "path": path} for p, path in zip(self.packages, cfg.inputs)],
            "strategy": cfg.strategy.model_dump(mode="json"),
            "seed": cfg.seed,
            "target_records": cfg.target_records,
            "group_by": cfg.group_by,
            "quality": cfg.quality.model_dump(mode="json"),
            "allow_shortfall": cfg.allow_shortfall,
            "redistribute": cfg.redistribute,
            "retained_splits": self.retained_splits,
            "near_dedup_report": None if self.report is None else {
                "path": cfg.near_dedup_report, "manifest_sha256": self.report.manifest_sha256,
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
        """Write plan.json (key-sorted, stable) through a temporary sibling."""
        path = Path(path)
        for p in self.packages:
            if is_within(path, p.path):
                raise NearDedupError(f"plan output {path} is inside input package "
                                     f"{p.package_id}; packages are immutable")
        if self.report is not None and is_within(path, self.report.path):
            raise NearDedupError(f"plan output {path} is inside the near-dedup report")
        if path.is_dir():
            raise NearDedupError(f"plan output {path} is a directory")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        try:
            write_json(tmp, self.to_json())
            os.replace(tmp, path)
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
                             for i, (c, w) in enumerate(zip(row, widths))).rstrip()

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


def _open_inputs(cfg: MixtureConfig) -> list[Package]:
    """Open the input packages; their kind must be the mixture's and every split name must
    be usable as the folder ``data/<split>/`` of the mixture."""
    packages = open_packages([Path(p) for p in cfg.inputs])
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
        report = read_report(Path(cfg.near_dedup_report))
        kinds = {i.get("kind") for i in report.inputs}
        if kinds - {cfg.kind}:
            raise NearDedupError(f"near_dedup_report {report.path} covers {sorted(kinds)} "
                                 f"packages but the mixture {cfg.name} is {cfg.kind}")
        check_inputs_match(packages, report)
    contamination = None
    if cfg.contamination_report is not None:
        contamination = read_contamination(Path(cfg.contamination_report))
        check_inputs_match(packages, contamination)  # type: ignore[arg-type]
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
                contamination=contamination)
    if plan.shortfall and not cfg.allow_shortfall:
        short = ", ".join(f"{r['domain']} {r['eligible']:,} eligible for quota {r['quota']:,}"
                          for r in rows if r["shortfall"])
        how = "after redistribution" if cfg.redistribute else "(redistribute is off)"
        raise NearDedupError(
            f"mixture {cfg.name}: {plan.shortfall:,} of {cfg.target_records:,} records short "
            f"{how} ({short}); set allow_shortfall: true to record the shortfall, or lower "
            f"target_records")
    return plan


# --------------------------------------------------------------------------- package format

class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class InputRef(_Frozen):
    """An input package as recorded in a mixture (path as written in the config)."""

    package_id: str
    manifest_sha256: str
    path: str


class DataFile(_Frozen):
    """One data file of a mixture: every record of one split."""

    path: str
    split: str
    records: int = Field(ge=0)
    sha256: str


class ReportRef(_Frozen):
    """The embedded report: its folder inside the mixture and its manifest's sha256."""

    path: Literal["near-dedup"]
    manifest_sha256: str


class ContaminationRef(_Frozen):
    """The embedded contamination report: its folder and its manifest's sha256."""

    path: Literal["contamination"]
    manifest_sha256: str


class ManifestCounts(_Frozen):
    target_records: int
    selected: int
    shortfall: int
    retained: int
    excluded_by_report: int
    by_split: dict[str, int]
    removed_contaminated: int = 0
    by_domain: dict[str, int]


class MixtureManifest(_Frozen):
    """``manifest.json`` of a mixture package (format_version 1)."""

    format: Literal["mixture-package"] = FORMAT
    format_version: Literal[1] = FORMAT_VERSION
    tool_version: str
    name: str
    kind: Literal["cpt", "sft"]
    inputs: list[InputRef]
    strategy: Strategy
    seed: int
    target_records: int
    group_by: str
    quality: QualityFilter
    allow_shortfall: bool
    redistribute: bool
    retained_splits: list[str]
    counts: ManifestCounts
    near_dedup_report: ReportRef | None
    files: list[DataFile]
    contamination_report: ContaminationRef | None = None


# --------------------------------------------------------------------------- build

@dataclass(frozen=True)
class BuildResult:
    """A finished mixture package."""

    output: Path
    manifest: dict

    def summary(self) -> str:
        c = self.manifest["counts"]
        rep = self.manifest["near_dedup_report"]
        text = (f"built mixture {self.manifest['name']} at {self.output}: "
                f"{c['selected']:,} selected of {c['target_records']:,} target "
                f"(shortfall {c['shortfall']:,}), {c['retained']:,} retained records, "
                f"{len(self.manifest['files'])} data files")
        if self.manifest.get("contamination_report") is not None:
            text += (f", contamination report embedded ({c['removed_contaminated']:,} pool "
                     f"samples removed)")
        if rep is not None:
            text += (f", near-dedup report embedded ({c['excluded_by_report']:,} pool samples "
                     f"excluded)")
        return text


def _needed_ref_targets(plan: Plan, outputs: set[SampleKey]) -> set[SampleKey]:
    """Every record along the ref chains of the output records."""
    needed: set[SampleKey] = set()
    for key in outputs:
        while key in plan.ref_of:
            key = plan.ref_of[key]
            if key in needed:
                break
            needed.add(key)
    return needed


def _write_data(plan: Plan, work: Path, out: Path, progress: bool) -> list[dict]:
    """Second pass over the inputs: write selected and retained records, refs resolved.

    Lines go to one scratch file per (split, input package) in stream order, then are
    concatenated per split in input package order into ``data/<split>/part-00000.jsonl``.
    """
    retained = set(plan.retained_splits)
    index_of = {p.package_id: i for i, p in enumerate(plan.packages)}
    needed = _needed_ref_targets(plan, plan.selected | plan.retained_refs)
    resolved_store: dict[SampleKey, dict] = {}
    handles: dict[tuple[str, int], Any] = {}
    counts: Counter[tuple[str, int]] = Counter()
    bar = Progress("mixture: writing records", sum(p.record_count for p in plan.packages),
                   enabled=progress)
    try:
        for rec in stream_records(plan.packages):
            bar.advance()
            key = (rec.package_id, rec.sample_id)
            wanted = rec.split in retained or key in plan.selected
            if not wanted and key not in needed:
                continue
            if rec.ref is not None:
                # Ref targets come first (dependency order) and are in ``needed``.
                resolved = resolve_ref(rec.data, resolved_store[rec.ref])
            else:
                resolved = rec.data
            if key in needed:
                resolved_store[key] = resolved
            if not wanted:
                continue
            slot = (rec.split, index_of[rec.package_id])
            if slot not in handles:
                part = work / rec.split / f"{slot[1]:05d}.jsonl"
                part.parent.mkdir(parents=True, exist_ok=True)
                handles[slot] = open(part, "wb")
            handles[slot].write(json_line(
                resolved | {"origin": {"package_id": rec.package_id,
                                       "sample_id": rec.sample_id}}))
            counts[slot] += 1
    finally:
        for fh in handles.values():
            fh.close()
    bar.finish()
    files = []
    for split in sorted({s for s, _ in handles}):
        rel = f"data/{split}/part-00000.jsonl"
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as dst:
            for slot in sorted(k for k in handles if k[0] == split):
                with open(work / split / f"{slot[1]:05d}.jsonl", "rb") as src:
                    shutil.copyfileobj(src, dst)
        files.append({"path": rel, "split": split,
                      "records": sum(n for (s, _), n in counts.items() if s == split),
                      "sha256": sha256_file(target)})
    return files


def _copy_report(plan: Plan, dest: Path) -> None:
    """Byte-identical copy of the report folder; re-verified against the planned identity."""
    assert plan.report is not None
    src = plan.report.path
    rels = [*verify_checksums(src, "near_dedup_report"), CHECKSUMS]
    for rel in rels:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, target)
    verify_checksums(dest, "near_dedup_report copy")
    if sha256_file(dest / CHECKSUMS) != plan.report.checksums_sha256:
        raise NearDedupError(f"near_dedup_report {src} changed while the mixture was built")


def build_mixture(cfg: MixtureConfig, output: Path, *, progress: bool = True) -> BuildResult:
    """Plan, then write the immutable mixture package atomically at ``output``."""
    output = Path(output)
    require_new_output(output)
    for path in cfg.inputs:
        if is_within(output, Path(path)):
            raise NearDedupError(f"output {output} is inside input package {path}; "
                                 f"packages are immutable")
    if cfg.near_dedup_report is not None and is_within(output, Path(cfg.near_dedup_report)):
        raise NearDedupError(f"output {output} is inside the near-dedup report")
    if cfg.contamination_report is not None and is_within(output,
                                                          Path(cfg.contamination_report)):
        raise NearDedupError(f"output {output} is inside the contamination report")
    plan = plan_mixture(cfg, progress=progress)
    with atomic_dir(output) as tmp:
        work = tmp / ".work"
        files = _write_data(plan, work, tmp, progress)
        shutil.rmtree(work, ignore_errors=True)
        write_json(tmp / "plan.json", plan.to_json())
        report_ref = None
        if plan.report is not None:
            _copy_report(plan, tmp / REPORT_DIR)
            report_ref = ReportRef(path=REPORT_DIR, manifest_sha256=plan.report.manifest_sha256)
        contamination_ref = None
        if plan.contamination is not None:
            copy_contamination(plan.contamination.path, tmp / CONTAMINATION_DIR,
                               plan.contamination.checksums_sha256)
            contamination_ref = ContaminationRef(
                path=CONTAMINATION_DIR, manifest_sha256=plan.contamination.manifest_sha256)
        by_split = {f["split"]: f["records"] for f in files}
        selected_written = sum(n for s, n in by_split.items()
                               if s not in set(plan.retained_splits))
        if selected_written != plan.selected_total:
            raise NearDedupError(f"mixture {cfg.name}: wrote {selected_written} selected "
                                 f"records, planned {plan.selected_total}; inputs changed "
                                 f"during the build")
        manifest = MixtureManifest(
            tool_version=__version__, name=cfg.name, kind=cfg.kind,
            inputs=plan.to_json()["inputs"], strategy=cfg.strategy.model_dump(mode="json"),
            seed=cfg.seed, target_records=cfg.target_records, group_by=cfg.group_by,
            quality=cfg.quality, allow_shortfall=cfg.allow_shortfall,
            redistribute=cfg.redistribute, retained_splits=plan.retained_splits,
            counts=ManifestCounts(
                target_records=cfg.target_records, selected=plan.selected_total,
                shortfall=plan.shortfall, retained=sum(plan.retained_records.values()),
                excluded_by_report=plan.excluded_by_report, by_split=by_split,
                removed_contaminated=plan.removed_contaminated,
                by_domain={r["domain"]: r["selected"] for r in plan.rows}),
            near_dedup_report=report_ref, files=files,
            contamination_report=contamination_ref).model_dump(
                mode="json", exclude=None if contamination_ref is not None else
                {"contamination_report": True, "counts": {"removed_contaminated"}})
        write_json(tmp / "manifest.json", manifest)
        write_checksums(tmp)
    return BuildResult(output=output, manifest=manifest)


# --------------------------------------------------------------------------- verify

@dataclass(frozen=True)
class VerifyResult:
    """A verified mixture package."""

    path: Path
    files: int
    selected: int
    retained: int
    report_decisions: int | None
    contaminated_samples: int | None = None

    def summary(self) -> str:
        text = (f"mixture {self.path} OK: {self.files} files match checksums, "
                f"{self.selected:,} selected and {self.retained:,} retained records")
        if self.contaminated_samples is not None:
            text += (f", embedded contamination report verified (none of its "
                     f"{self.contaminated_samples:,} contaminated samples selected)")
        if self.report_decisions is None:
            return text + ", no near-dedup report (plain mixture)"
        return (text + f", embedded near-dedup report verified ({self.report_decisions:,} "
                f"decisions): no excluded sample selected, retained splits complete")


def _iter_data_lines(folder: Path, rel: str, label: str) -> Iterator[tuple[int, dict]]:
    for n, obj in iter_json_objects(folder, rel, label):
        origin = obj.get("origin")
        if not isinstance(origin, dict) or not isinstance(origin.get("package_id"), str) \
                or not isinstance(origin.get("sample_id"), str):
            raise NearDedupError(f"{label}: {rel}:{n}: no origin {{package_id, sample_id}}")
        yield n, obj


class PlanReport(_Frozen):
    """The report a plan was made with: the path as written in the config, its identity."""

    path: str
    manifest_sha256: str
    excluded_pool_samples: int = Field(ge=0)


class PlanContamination(_Frozen):
    """The contamination report a plan was made with, and how many pool samples it removed."""

    path: str
    manifest_sha256: str
    removed_pool_samples: int = Field(ge=0)


class PlanTotals(_Frozen):
    selected: int = Field(ge=0)
    shortfall: int = Field(ge=0)
    redistributed: int = Field(ge=0)


class PlanFile(_Frozen):
    """``plan.json`` (`Plan.to_json`), strict JSON types."""

    format: Literal["mixture-plan"]
    format_version: int = Field(ge=FORMAT_VERSION, le=FORMAT_VERSION)
    name: str
    kind: Literal["cpt", "sft"]
    inputs: list[InputRef]
    strategy: Strategy
    seed: int
    target_records: int
    group_by: str
    quality: QualityFilter
    allow_shortfall: bool
    redistribute: bool
    retained_splits: list[str]
    near_dedup_report: PlanReport | None
    contamination_report: PlanContamination | None = None
    domains: list[PlanRow]
    totals: PlanTotals
    retained_records: dict[str, int]


_SAME_IN_PLAN = ("name", "kind", "inputs", "strategy", "seed", "target_records", "group_by",
                 "quality", "allow_shortfall", "redistribute", "retained_splits")


def _check_plan(manifest: MixtureManifest, plan: PlanFile, report_excluded: int | None,
                label: str) -> None:
    """plan.json against manifest.json and against itself: the mixing parameters are the
    manifest's; weights, quotas, redistribution and selection are recomputed from each
    row's available and eligible counts (module docstring, steps 3–6) and must be equal."""
    def fail(message: str) -> NoReturn:
        raise NearDedupError(f"{label}: {message}")

    for name in _SAME_IN_PLAN:
        if getattr(plan, name) != getattr(manifest, name):
            fail(f"plan.json {name} differs from manifest.json")
    ref, planned_ref = manifest.near_dedup_report, plan.near_dedup_report
    counts = manifest.counts
    if (ref is None) != (planned_ref is None) or (
            ref is not None and planned_ref is not None
            and (ref.manifest_sha256 != planned_ref.manifest_sha256
                 or planned_ref.excluded_pool_samples != counts.excluded_by_report)):
        fail("plan.json near_dedup_report differs from manifest.json")
    cref, planned_cref = manifest.contamination_report, plan.contamination_report
    removed = sum(r.removed_contaminated for r in plan.domains)
    if (cref is None) != (planned_cref is None) or (
            cref is not None and planned_cref is not None
            and (cref.manifest_sha256 != planned_cref.manifest_sha256
                 or planned_cref.removed_pool_samples != removed)) \
            or removed != counts.removed_contaminated:
        fail("plan.json contamination_report differs from manifest.json or its domains")
    rows = {r.domain: r for r in plan.domains}
    if len(rows) != len(plan.domains) or list(rows) != sorted(rows):
        fail("plan.json domains are not sorted and distinct")
    for r in plan.domains:
        left = r.available_after_dedup - r.removed_contaminated
        if not 0 <= r.eligible <= left <= r.available_after_dedup <= r.available_before_dedup \
                or (ref is None and r.available_after_dedup != r.available_before_dedup) \
                or (cref is None and r.removed_contaminated):
            fail(f"plan.json domain {r.domain}: eligible ≤ available after dedup and "
                 f"contamination ≤ available before dedup (equal without the reports) does "
                 f"not hold")
    excluded = sum(r.available_before_dedup - r.available_after_dedup for r in plan.domains)
    if excluded != counts.excluded_by_report or (report_excluded is not None
                                                 and excluded != report_excluded):
        fail(f"plan.json drops {excluded} samples by dedup; manifest.json says "
             f"{counts.excluded_by_report}"
             + ("" if report_excluded is None else
                f", the embedded report excludes {report_excluded}"))
    weights = strategy_weights(plan.strategy, {d: r.available_after_dedup - r.removed_contaminated
                                               for d, r in rows.items()})
    if sorted(weights) != list(rows):
        fail("plan.json domains differ from the strategy's domains")
    eligible = {d: r.eligible for d, r in rows.items()}
    quota, selected = allocate(plan.target_records, weights, eligible, plan.redistribute)
    for d, r in rows.items():
        own = min(quota[d], eligible[d])
        expected = (weights[d], quota[d], selected[d], selected[d] - own, quota[d] - own)
        if (r.weight, r.quota, r.selected, r.redistributed, r.shortfall) != expected:
            fail(f"plan.json domain {d}: weight, quota, selected, redistributed or shortfall "
                 f"differ from the strategy applied to its counts")
    total = sum(selected.values())
    shortfall = plan.target_records - total
    if (plan.totals.selected, plan.totals.shortfall, plan.totals.redistributed) != \
            (total, shortfall, sum(r.redistributed for r in plan.domains)) \
            or (counts.target_records, counts.selected, counts.shortfall) != \
            (plan.target_records, total, shortfall):
        fail("plan.json totals differ from its domains or from manifest.json counts")
    if shortfall and not plan.allow_shortfall:
        fail(f"a shortfall of {shortfall} without allow_shortfall")
    if counts.by_domain != {d: r.selected for d, r in rows.items()}:
        fail("manifest.json counts.by_domain differ from plan.json")
    retained = set(plan.retained_splits)
    by_split = {f.split: f.records for f in manifest.files}
    if counts.by_split != by_split or plan.retained_records != \
            {s: n for s, n in sorted(by_split.items()) if s in retained} \
            or counts.retained != sum(plan.retained_records.values()):
        fail("manifest.json counts.by_split/retained or plan.json retained_records differ "
             "from the data files")


def _embedded_decisions(path: Path, manifest: MixtureManifest,
                        label: str) -> dict[SampleKey, SampleDecision] | None:
    """Verify the embedded report against the mixture manifest; its decisions by sample."""
    ref = manifest.near_dedup_report
    if ref is None:
        return None
    report_dir = path / ref.path
    verified = verify_report(report_dir, keep_text_sha256=True)
    if sha256_file(report_dir / "manifest.json") != ref.manifest_sha256:
        raise NearDedupError(f"{label}: {ref.path}/manifest.json does not match the "
                             f"manifest_sha256 recorded in manifest.json")
    rmanifest = verified.manifest
    mine = sorted((i.package_id, i.manifest_sha256) for i in manifest.inputs)
    theirs = sorted((i["package_id"], i["manifest_sha256"]) for i in rmanifest["inputs"])
    if mine != theirs:
        raise NearDedupError(f"{label}: inputs in manifest.json differ from the embedded "
                             f"report's inputs")
    if sorted(rmanifest["config"]["retained_splits"]) != sorted(manifest.retained_splits):
        raise NearDedupError(f"{label}: retained_splits in manifest.json differ from the "
                             f"embedded report's")
    return verified.samples


def _embedded_contamination(path: Path, manifest: MixtureManifest,
                            label: str) -> set[SampleKey]:
    """Verify the embedded contamination report; its contaminated training samples."""
    ref = manifest.contamination_report
    if ref is None:
        return set()
    folder = path / ref.path
    view = read_contamination(folder)
    if view.manifest_sha256 != ref.manifest_sha256:
        raise NearDedupError(f"{label}: {ref.path}/manifest.json does not match the "
                             f"manifest_sha256 recorded in manifest.json")
    mine = sorted((i.package_id, i.manifest_sha256) for i in manifest.inputs)
    theirs = sorted((i.get("package_id"), i.get("manifest_sha256")) for i in view.inputs)
    if mine != theirs:
        raise NearDedupError(f"{label}: inputs in manifest.json differ from the embedded "
                             f"contamination report's inputs")
    return view.contaminated


def _check_kept(d: SampleDecision | None, key: SampleKey, split: str, loc: str) -> None:
    """A mixture line's sample must be a ``keep`` decision of the same split."""
    if d is None:
        raise NearDedupError(f"{loc}: sample {key[0]}/{key[1]} is not in the embedded "
                             f"report's decisions")
    if d.decision != "keep":
        kept = d.kept or ("?", "?")
        raise NearDedupError(f"{loc}: sample {key[0]}/{key[1]} was excluded by the near-dedup "
                             f"report ({d.reason} of {kept[0]}/{kept[1]}) but is selected")
    if d.split != split:
        raise NearDedupError(f"{loc}: sample {key[0]}/{key[1]} is in split {d.split} in "
                             f"the report, not {split}")


def _check_text(obj: dict, kind: str, d: SampleDecision, loc: str) -> None:
    """The record's compared text (refs resolved) must hash to the report's text_sha256."""
    try:
        text = compared_text(kind, obj)
    except (KeyError, TypeError):
        raise NearDedupError(f"{loc}: the record has no {kind} text to compare") from None
    if not isinstance(text, str) or hashlib.sha256(text.encode()).digest() != d.text_sha256:
        raise NearDedupError(f"{loc}: the record's text does not match the text_sha256 of its "
                             f"sample in the embedded report (record edited)")


def verify_mixture(path: Path) -> VerifyResult:
    """Re-check a mixture package from its own files alone (no inputs, no SQLite index).

    - ``checksums.sha256`` in canonical form over plain files (`fsutil.verify_checksums`);
      only manifest.json, plan.json, the listed data files and the embedded report belong;
    - manifest.json and plan.json against their models (strict types); each data file's
      sha256 and record count as recorded in manifest.json ``files`` (so an edited record
      with a regenerated ``checksums.sha256`` is caught), plan.json recomputed and equal to
      the manifest's parameters and counts (`_check_plan`);
    - the embedded report verified by `report.verify_report`, its inputs and retained splits
      equal the mixture's, its exclusion count equal to the plan's;
    - every line's origin is an input sample, appears once, in input package order; with a
      report it is a ``keep`` decision of its split, lines follow the report's sample order
      and the record's compared text hashes to the sample's ``text_sha256`` (so a record
      edited with manifest.json and checksums regenerated is caught); retained splits are
      complete. A plain mixture has no reference for the text of its records.
    """
    path = Path(path)
    label = f"mixture {path}"
    if not path.is_dir():
        raise NearDedupError(f"{label}: not a directory")
    listed = verify_checksums(path, "mixture")
    manifest = read_model(path / "manifest.json", MixtureManifest, label)
    plan = read_model(path / "plan.json", PlanFile, label)
    retained = set(manifest.retained_splits)
    group_by = manifest.group_by
    decisions = _embedded_decisions(path, manifest, label)
    report_excluded = None if decisions is None else sum(
        1 for d in decisions.values() if d.decision == "exclude")
    _check_plan(manifest, plan, report_excluded, label)
    contaminated = _embedded_contamination(path, manifest, label)

    data_on_disk = sorted(r for r in listed if r.startswith("data/"))
    if sorted(f.path for f in manifest.files) != data_on_disk:
        raise NearDedupError(f"{label}: manifest.json files differ from the data files present")
    for rel in listed:
        if rel not in ("manifest.json", "plan.json") and not rel.startswith("data/") and not (
                decisions is not None and rel.startswith(REPORT_DIR + "/")) and not (
                manifest.contamination_report is not None
                and rel.startswith(CONTAMINATION_DIR + "/")):
            raise NearDedupError(f"{label}: {rel} does not belong in a mixture package")
    input_pos = {i.package_id: k for k, i in enumerate(manifest.inputs)}
    seen: set[SampleKey] = set()
    selected_by_domain: Counter[str] = Counter()
    selected = retained_n = 0
    for entry in manifest.files:
        rel, split = entry.path, entry.split
        if rel != f"data/{split}/part-00000.jsonl":
            raise NearDedupError(f"{label}: {rel} is not the data file of split {split}")
        if listed[rel] != entry.sha256:
            raise NearDedupError(f"{label}: {rel} does not match its sha256 in manifest.json "
                                 f"files (file changed)")
        lines = 0
        order: tuple[int, int] = (-1, -1)
        for n, obj in _iter_data_lines(path, rel, label):
            lines += 1
            key = (obj["origin"]["package_id"], obj["origin"]["sample_id"])
            if key[0] not in input_pos:
                raise NearDedupError(f"{label}: {rel}:{n}: origin package {key[0]} is not "
                                     f"among the inputs")
            if key in seen:
                raise NearDedupError(f"{label}: {rel}:{n}: sample {key[0]}/{key[1]} appears "
                                     f"twice")
            seen.add(key)
            d = decisions.get(key) if decisions is not None else None
            here = (input_pos[key[0]], d.line if d is not None else 0)
            if here < order:
                raise NearDedupError(f"{label}: {rel}:{n}: records are not in input package "
                                     f"order" + (" and sample order (the report's decisions)"
                                                 if decisions is not None else ""))
            order = here
            if decisions is not None:
                _check_kept(d, key, split, f"{label}: {rel}:{n}")
                _check_text(obj, manifest.kind, d, f"{label}: {rel}:{n}")
            if split not in retained and key in contaminated:
                raise NearDedupError(f"{label}: {rel}:{n}: sample {key[0]}/{key[1]} contains "
                                     f"an eval item (embedded contamination report) but is "
                                     f"selected")
            if split in retained:
                retained_n += 1
            else:
                selected += 1
                selected_by_domain[str(obj.get(group_by))] += 1
        if lines != entry.records:
            raise NearDedupError(f"{label}: {rel} has {lines} records, manifest.json says "
                                 f"{entry.records}")
    if decisions is not None:
        for key, d in decisions.items():
            if d.split in retained and key not in seen:
                raise NearDedupError(f"{label}: retained split {d.split} is incomplete: "
                                     f"sample {key[0]}/{key[1]} is missing")
    counts = manifest.counts
    if counts.selected != selected or counts.retained != retained_n:
        raise NearDedupError(f"{label}: manifest.json counts ({counts.selected} selected, "
                             f"{counts.retained} retained) differ from the data "
                             f"({selected}, {retained_n})")
    planned = {r.domain: r.selected for r in plan.domains if r.selected}
    if planned != dict(selected_by_domain):
        raise NearDedupError(f"{label}: selected records per {group_by} differ from plan.json")
    return VerifyResult(path=path, files=len(listed), selected=selected, retained=retained_n,
                        report_decisions=None if decisions is None else len(decisions),
                        contaminated_samples=None if manifest.contamination_report is None
                        else len(contaminated))
