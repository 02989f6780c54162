"""Mixture verify: re-check a built mixture package from its own files alone — checksums,
manifest and plan models, the plan recomputed from its counts, the embedded reports, and
every data line against them. Needs no input package and no SQLite index."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from near_dedup_core.compare import compared_text
from near_dedup_core.contamination import read_contamination
from near_dedup_core.errors import NearDedupError
from near_dedup_core.fsutil import iter_json_objects, read_model, sha256_file, verify_checksums
from near_dedup_core.mixture.allocation import allocate, strategy_weights
from near_dedup_core.mixture.formats import (
    CONTAMINATION_DIR,
    REPORT_DIR,
    MixingParameters,
    MixtureManifest,
    PlanFile,
)
from near_dedup_core.mixture.inputs import SampleKey
from near_dedup_core.progress import Progress
from near_dedup_core.report import SampleDecision, verify_report
from near_dedup_core.wording import count


@dataclass(frozen=True)
class VerifyResult:
    """A verified mixture package."""

    path: Path
    files: int
    selected: int
    retained: int
    report_decisions: int | None
    contaminated_samples: int | None = None
    #: samples the embedded report takes down (None: a report without takedowns)
    taken_down: int | None = None

    def summary(self) -> str:
        text = (f"mixture {self.path} OK: {count(self.files, 'file')} match checksums, "
                f"{self.selected:,} selected and {self.retained:,} retained records")
        if self.contaminated_samples is not None:
            text += (f", embedded contamination report verified (none of its "
                     f"{self.contaminated_samples:,} contaminated samples selected)")
        if self.report_decisions is None:
            return text + ", no near-dedup report (plain mixture)"
        if self.taken_down is not None:
            return (text + f", embedded near-dedup report verified ({self.report_decisions:,} "
                    f"decisions): no excluded sample selected, none of its "
                    f"{count(self.taken_down, 'sample')} taken down remains, retained splits "
                    f"complete but for those")
        return (text + f", embedded near-dedup report verified ({self.report_decisions:,} "
                f"decisions): no excluded sample selected, retained splits complete")


def _iter_data_lines(folder: Path, rel: str, label: str) -> Iterator[tuple[int, dict]]:
    for n, obj in iter_json_objects(folder, rel, label):
        origin = obj.get("origin")
        if not isinstance(origin, dict) or not isinstance(origin.get("package_id"), str) \
                or not isinstance(origin.get("sample_id"), str):
            raise NearDedupError(f"{label}: {rel}:{n}: no origin {{package_id, sample_id}}")
        yield n, obj


_SAME_IN_PLAN = tuple(MixingParameters.model_fields)


def _check_plan(manifest: MixtureManifest, plan: PlanFile, report_excluded: int | None,
                label: str) -> None:
    """plan.json against manifest.json and against itself: the mixing parameters are the
    manifest's; weights, quotas, redistribution and selection are recomputed from each
    row's available and eligible counts (package docstring, steps 3–6) and must be equal."""
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


def _check_kept(d: SampleDecision | None, key: SampleKey, split: str,
                loc: str) -> SampleDecision:
    """A mixture line's sample must be a ``keep`` decision of the same split; returns it."""
    if d is None:
        raise NearDedupError(f"{loc}: sample {key[0]}/{key[1]} is not in the embedded "
                             f"report's decisions")
    if d.reason == "takedown":
        raise NearDedupError(f"{loc}: sample {key[0]}/{key[1]} was taken down (the embedded "
                             f"report's reason takedown) but is in the mixture")
    if d.decision != "keep":
        kept = d.kept or ("?", "?")
        raise NearDedupError(f"{loc}: sample {key[0]}/{key[1]} was excluded by the near-dedup "
                             f"report ({d.reason} of {kept[0]}/{kept[1]}) but is selected")
    if d.split != split:
        raise NearDedupError(f"{loc}: sample {key[0]}/{key[1]} is in split {d.split} in "
                             f"the report, not {split}")
    return d


def _check_text(obj: dict, kind: str, d: SampleDecision, loc: str) -> None:
    """The record's compared text (refs resolved) must hash to the report's text_sha256."""
    try:
        text = compared_text(kind, obj)
    except (KeyError, TypeError):
        raise NearDedupError(f"{loc}: the record has no {kind} text to compare") from None
    if not isinstance(text, str) or hashlib.sha256(text.encode()).digest() != d.text_sha256:
        raise NearDedupError(f"{loc}: the record's text does not match the text_sha256 of its "
                             f"sample in the embedded report (record edited)")


def verify_mixture(path: Path, progress: bool = False) -> VerifyResult:  # noqa: C901 (its documented checks, in order)
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
      edited with manifest.json and checksums regenerated is caught), so no sample the
      report takes down (reason ``takedown``) remains; retained splits are complete but for
      those. A plain mixture has no reference for the text of its records.
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
        1 for d in decisions.values() if d.decision == "exclude" and d.split not in retained)
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
    bar = Progress("mixture verify: records", sum(entry.records for entry in manifest.files),
                   enabled=progress)
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
            bar.advance()
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
                kept = _check_kept(d, key, split, f"{label}: {rel}:{n}")
                _check_text(obj, manifest.kind, kept, f"{label}: {rel}:{n}")
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
    bar.finish()
    if decisions is not None:
        for key, d in decisions.items():
            if d.split in retained and key not in seen and d.reason != "takedown":
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
                        else len(contaminated),
                        taken_down=_taken_down(decisions))


def _taken_down(decisions: dict[SampleKey, SampleDecision] | None) -> int | None:
    """Samples the embedded report takes down; None without a report or without any."""
    n = sum(d.reason == "takedown" for d in (decisions or {}).values())
    return n or None
