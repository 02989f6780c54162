"""Mixture build: plan, then write the package atomically: data files with refs resolved,
``plan.json``, byte-identical copies of the reports, ``manifest.json`` and checksums."""

from __future__ import annotations

import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from near_dedup_core import __version__
from near_dedup_core.contamination import copy_report as copy_contamination
from near_dedup_core.errors import NearDedupError
from near_dedup_core.fsutil import (
    CHECKSUMS,
    is_within,
    json_line,
    require_new_output_outside,
    sha256_file,
    verify_checksums,
    write_checksums,
    write_json,
)
from near_dedup_core.mixture.config import MixtureConfig
from near_dedup_core.mixture.formats import (
    CONTAMINATION_DIR,
    REPORT_DIR,
    ContaminationRef,
    DataFile,
    ManifestCounts,
    MixtureManifest,
    ReportRef,
)
from near_dedup_core.mixture.inputs import SampleKey, resolve_ref
from near_dedup_core.mixture.plan import Plan, plan_mixture
from near_dedup_core.package import stream_records
from near_dedup_core.progress import Progress
from near_dedup_core.storage import Location, is_url, parse_location
from near_dedup_core.wording import count


@dataclass(frozen=True)
class BuildResult:
    """A finished mixture package."""

    output: Path | str  # a local folder, or a URL
    manifest: dict

    def summary(self) -> str:
        c = self.manifest["counts"]
        rep = self.manifest["near_dedup_report"]
        text = (f"built mixture {self.manifest['name']} at {self.output}: "
                f"{c['selected']:,} selected of {c['target_records']:,} target "
                f"(shortfall {c['shortfall']:,}), {count(c['retained'], 'retained record')}, "
                f"{count(len(self.manifest['files']), 'data file')}")
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


def _write_data(plan: Plan, work: Path, out: Path, progress: bool) -> list[DataFile]:
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
            wanted = (rec.split in retained and key not in plan.retained_dropped) \
                or key in plan.selected
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
    files: list[DataFile] = []
    for split in sorted({s for s, _ in handles}):
        rel = f"data/{split}/part-00000.jsonl"
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as dst:
            for slot in sorted(k for k in handles if k[0] == split):
                with open(work / split / f"{slot[1]:05d}.jsonl", "rb") as src:
                    shutil.copyfileobj(src, dst)
        files.append(DataFile(path=rel, split=split,
                              records=sum(n for (s, _), n in counts.items() if s == split),
                              sha256=sha256_file(target)))
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


def build_mixture(cfg: MixtureConfig, output: str | Path | Location, *,
                  progress: bool = True) -> BuildResult:
    """Plan, then write the immutable mixture package atomically at ``output`` (a local
    folder, or a URL that `storage` publishes to)."""
    location = parse_location(output)
    folder = location.local_path
    if folder is None:
        location.require_new_output()
        return _build(cfg, location, location.url, progress)
    require_new_output_outside(folder, [p for p in cfg.inputs if not is_url(p)])
    if cfg.near_dedup_report is not None and not is_url(cfg.near_dedup_report) and \
            is_within(folder, Path(cfg.near_dedup_report)):
        raise NearDedupError(f"output {folder} is inside the near-dedup report")
    if cfg.contamination_report is not None and not is_url(cfg.contamination_report) and \
            is_within(folder, Path(cfg.contamination_report)):
        raise NearDedupError(f"output {folder} is inside the contamination report")
    return _build(cfg, location, folder, progress)


def _build(cfg: MixtureConfig, location: Location, output: Path | str,
           progress: bool) -> BuildResult:
    plan = plan_mixture(cfg, progress=progress)
    with location.publish() as tmp:
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
        by_split = {f.split: f.records for f in files}
        selected_written = sum(n for s, n in by_split.items()
                               if s not in set(plan.retained_splits))
        if selected_written != plan.selected_total:
            raise NearDedupError(f"mixture {cfg.name}: wrote {selected_written} selected "
                                 f"records, planned {plan.selected_total}; inputs changed "
                                 f"during the build")
        manifest = MixtureManifest(
            tool_version=__version__, name=cfg.name, kind=cfg.kind,
            inputs=plan.to_json()["inputs"], strategy=cfg.strategy,
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
