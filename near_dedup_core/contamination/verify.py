"""`report verify` of a contamination report, and what a mixture reads from a verified one."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from near_dedup_core.contamination.report import FILES, FORMAT, FORMAT_VERSION, counts_of, summarize
from near_dedup_core.errors import NearDedupError
from near_dedup_core.fsutil import (
    iter_json_objects,
    read_json_object,
    sha256_file,
    verify_checksums,
)

LINE_FIELDS = ("eval", "training", "containment", "item_shingles", "common_shingles", "span",
               "numbers_differ")



def is_contamination_report(path: Path) -> bool:
    """Whether ``path/manifest.json`` declares a contamination report (no other check)."""
    try:
        return read_json_object(Path(path) / "manifest.json", "report").get("format") == FORMAT
    except NearDedupError:
        return False


def _line_problem(row: dict, threshold: float, evals: dict, inputs: dict) -> str | None:
    for f in LINE_FIELDS:
        if f not in row:
            return f"missing field '{f}'"
    e, t, span = row["eval"], row["training"], row["span"]
    if not isinstance(e, dict) or not isinstance(t, dict) or not isinstance(span, dict):
        return "eval, training and span must be objects"
    for ref, fields in ((e, ("package_id", "sample_id", "split")),
                        (t, ("package_id", "sample_id", "split", "domain"))):
        for f in fields:
            if f not in ref:
                return f"missing field '{f}' in a sample reference"
    if e["package_id"] not in evals:
        return f"eval package {e['package_id']} is not among the manifest's evals"
    if t["package_id"] not in inputs:
        return f"training package {t['package_id']} is not among the manifest's inputs"
    n, c, value = row["item_shingles"], row["common_shingles"], row["containment"]
    if type(n) is not int or type(c) is not int or not 0 < c <= n:
        return "item_shingles and common_shingles must be integers with 0 < common ≤ item"
    if value != c / n:
        return f"containment {value} is not common_shingles / item_shingles = {c / n}"
    if value < threshold:
        return f"containment {value} is below the threshold {threshold}"
    start, end = span.get("start"), span.get("end")
    if type(start) is not int or type(end) is not int or not 0 <= start < end:
        return "span must have integers 0 ≤ start < end"
    if type(row["numbers_differ"]) is not bool:
        return "numbers_differ must be true or false"
    return None


@dataclass
class ContaminationSummary:
    path: Path
    manifest: dict

    @property
    def counts(self) -> dict:
        return self.manifest["counts"]

    def summary(self) -> str:
        c = self.counts
        return (f"contamination report {self.path}: OK — checksums, manifest, summary and "
                f"{c['pairs']:,} pairs consistent ({c['items_leaked']:,} of "
                f"{c['items_checked']:,} eval items leaked into "
                f"{c['training_samples_contaminated']:,} training samples)")


def iter_lines(path: Path) -> Iterator[tuple[int, dict]]:
    return iter_json_objects(path, "contamination.jsonl", f"contamination report {path}")


def verify_contamination(path: str | Path) -> ContaminationSummary:
    """Check a contamination report folder: checksums, manifest, every line, and the summary
    and counts recomputed from the lines. Raises NearDedupError naming the first problem."""
    path = Path(path)
    label = f"contamination report {path}"
    if not path.is_dir():
        raise NearDedupError(f"{label}: not a directory")
    listed = verify_checksums(path, "contamination report")
    for name in ("manifest.json", *FILES):
        if name not in listed:
            raise NearDedupError(f"{label}: {name} is not listed in checksums.sha256")
    manifest = read_json_object(path / "manifest.json", label)
    if manifest.get("format") != FORMAT:
        raise NearDedupError(f"{label}: manifest.json is not a contamination report manifest")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise NearDedupError(f"{label}: format_version {manifest.get('format_version')} is "
                             f"not {FORMAT_VERSION}")
    try:
        threshold = float(manifest["config"]["contamination_threshold"])
        evals = {e["package_id"]: e for e in manifest["evals"]}
        inputs = {i["package_id"]: i for i in manifest["inputs"]}
        recorded_lines = manifest["files"]["contamination.jsonl"]["lines"]
    except (KeyError, TypeError, ValueError):
        raise NearDedupError(f"{label}: manifest.json lacks config, evals, inputs or "
                             f"files") from None
    lines = []
    seen: set[tuple] = set()
    for n, row in iter_lines(path):
        problem = _line_problem(row, threshold, evals, inputs)
        if problem is not None:
            raise NearDedupError(f"{label}: contamination.jsonl:{n}: {problem}")
        key = (row["eval"]["package_id"], row["eval"]["sample_id"],
               row["training"]["package_id"], row["training"]["sample_id"])
        if key in seen:
            raise NearDedupError(f"{label}: contamination.jsonl:{n}: the pair appears twice")
        seen.add(key)
        lines.append(row)
    if recorded_lines != len(lines):
        raise NearDedupError(f"{label}: contamination.jsonl has {len(lines)} lines, "
                             f"manifest.json says {recorded_lines}")
    summary = read_json_object(path / "summary.json", label)
    try:
        eval_counts = [{k: e[k] for k in ("package_id", "items", "items_checked",
                                          "items_skipped_short")} for e in summary["evals"]]
        training = summary["training"]["samples"]
    except (KeyError, TypeError):
        raise NearDedupError(f"{label}: summary.json lacks evals or training") from None
    if [e["package_id"] for e in eval_counts] != list(evals):
        raise NearDedupError(f"{label}: summary.json evals differ from manifest.json evals")
    for e in eval_counts:
        if e["items"] != evals[e["package_id"]].get("records") or \
                e["items_checked"] + e["items_skipped_short"] != e["items"]:
            raise NearDedupError(f"{label}: summary.json item counts of {e['package_id']} do "
                                 f"not add up to its records in manifest.json")
    if training != sum(i.get("records", 0) for i in inputs.values()):
        raise NearDedupError(f"{label}: summary.json training samples differ from the "
                             f"inputs' records in manifest.json")
    recomputed = summarize(lines, eval_counts, training)
    if recomputed != summary:
        raise NearDedupError(f"{label}: summary.json does not match contamination.jsonl")
    if manifest.get("counts") != counts_of(recomputed):
        raise NearDedupError(f"{label}: counts in manifest.json do not match "
                             f"contamination.jsonl and summary.json")
    return ContaminationSummary(path, manifest)


@dataclass(frozen=True)
class ContaminationView:
    """What a mixture needs from a verified contamination report."""

    path: Path
    manifest_sha256: str
    checksums_sha256: str
    manifest: dict
    contaminated: set[tuple[str, str]]  # training (package_id, sample_id) of the lines
    contaminated_split: dict[tuple[str, str], str]

    @property
    def inputs(self) -> list[dict]:
        return self.manifest["inputs"]


def read_contamination(path: Path) -> ContaminationView:
    """Verify a contamination report and load its contaminated training samples."""
    verify_contamination(path)
    manifest = read_json_object(path / "manifest.json", f"contamination report {path}")
    split: dict[tuple[str, str], str] = {}
    for _, row in iter_lines(path):
        t = row["training"]
        split[(t["package_id"], t["sample_id"])] = t["split"]
    return ContaminationView(path=path, manifest_sha256=sha256_file(path / "manifest.json"),
                             checksums_sha256=sha256_file(path / "checksums.sha256"),
                             manifest=manifest, contaminated=set(split),
                             contaminated_split=split)


def copy_report(src: Path, dest: Path, checksums_sha256: str) -> None:
    """Byte-identical copy of a verified report folder, re-verified at ``dest`` and pinned
    to the checksums file read when it was planned."""
    for rel in [*verify_checksums(src, "contamination report"), "checksums.sha256"]:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, target)
    verify_checksums(dest, "contamination report copy")
    if sha256_file(dest / "checksums.sha256") != checksums_sha256:
        raise NearDedupError(f"contamination report {src} changed while the mixture was built")
