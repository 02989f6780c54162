"""``report verify --inputs``: a report checked against the texts of its input packages.

`report.verify_report` proves a report consistent from its own files; what it cannot prove
is that a decision's ``text_sha256`` and an origin's file, line and source are those of the
packages (a resealed edit of ``text_sha256`` is internally consistent). With the packages at
hand they are re-read: every record is streamed once, validated against its package's
manifest (`package.stream_records`, which also hashes every shard), its compared text (a
``ref`` takes its target's) hashed and compared with the decision's ``text_sha256``, and its
file, line, split and ``source`` compared with the sample's line of ``origins.jsonl``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import orjson

from near_dedup_core.compare import compared_text, text_sha256
from near_dedup_core.errors import NearDedupError, where
from near_dedup_core.fsutil import iter_json_objects
from near_dedup_core.package import open_packages, stream_records
from near_dedup_core.report.verify import ReportSummary, SampleKey, verify_report
from near_dedup_core.storage import Location


def _origin_digest(split: str, file: str, line: int, source: object) -> bytes:
    """A sample's place and source in 16 bytes (what is compared with origins.jsonl)."""
    return hashlib.blake2b(orjson.dumps([split, file, line, source],
                                        option=orjson.OPT_SORT_KEYS), digest_size=16).digest()


def _same_place(recorded: str, given: Path | str) -> bool:
    """Whether a report's ``inputs[].path`` names the package given: the same URL, or the
    same local folder (a relative path is read from the current directory, as `report
    explain` reads it)."""
    if isinstance(given, str) or "://" in recorded:
        return recorded.rstrip("/") == str(given).rstrip("/")
    return Path(recorded).resolve() == given.resolve()


def verify_report_inputs(path: str | Path,
                         packages: Sequence[str | Path | Location]) -> ReportSummary:
    """`verify_report`, then every sample's text and origin re-read from ``packages``, which
    must be exactly the report's inputs (same ids and manifest sha256, at the places its
    ``inputs[].path`` records). Any difference is one line naming the report's file and line
    (or the package, file and line)."""
    path = Path(path)
    summary = verify_report(path, keep_text_sha256=True)
    label = f"report {path}"
    inputs = {i["package_id"]: i for i in summary.manifest["inputs"]}
    given = open_packages(packages)
    for pkg in given:
        recorded = inputs.get(pkg.package_id)
        if recorded is None:
            raise NearDedupError(f"{label}: package {pkg.package_id} ({pkg.path}) is not an "
                                 f"input of the report")
        if pkg.manifest_sha256 != recorded["manifest_sha256"]:
            raise NearDedupError(f"{label}: package {pkg.package_id} at {pkg.path} is not the "
                                 f"report's input (manifest sha256 {pkg.manifest_sha256[:12]}…, "
                                 f"the report recorded {recorded['manifest_sha256'][:12]}…)")
        if not _same_place(recorded["path"], pkg.path):
            k = list(inputs).index(pkg.package_id)
            raise NearDedupError(f"{label}: manifest.json: inputs[{k}].path of package "
                                 f"{pkg.package_id} is {recorded['path']!r}, the package was "
                                 f"given at {str(pkg.path)!r}: the report records another "
                                 f"place for its input (moved, or the path was redirected)")
    missing = sorted(set(inputs) - {p.package_id for p in given})
    if missing:
        raise NearDedupError(f"{label}: input package {missing[0]} of the report is not among "
                             f"--inputs")
    referenced = {dep for pkg in given for dep in pkg.depends_on}
    target_sha: dict[SampleKey, bytes] = {}
    origin: dict[SampleKey, bytes] = {}
    samples = summary.samples
    for rec in stream_records(given):
        key = (rec.package_id, rec.sample_id)
        loc = where(rec.package_id, rec.file, rec.line)
        if rec.ref is None:
            sha = text_sha256(compared_text(given[0].kind, rec.data))
        else:
            sha = target_sha[rec.ref]
        if rec.package_id in referenced:
            target_sha[key] = sha
        d = samples.get(key)
        if d is None:
            raise NearDedupError(f"{label}: {loc}: sample {rec.sample_id!r} has no decision in "
                                 f"the report")
        if d.text_sha256 != sha:
            raise NearDedupError(f"{label}: decisions.jsonl:{d.line}: text_sha256 of "
                                 f"{key[0]}/{key[1]} is not the sha256 of its text in the "
                                 f"package ({loc})")
        origin[key] = _origin_digest(rec.split, rec.file, rec.line, rec.data.get("source"))
    for n, row in iter_json_objects(path, "origins.jsonl", label):
        key = (row["package_id"], row["sample_id"])
        if origin.get(key) != _origin_digest(row["split"], row["file"], row["line"],
                                             row["source"]):
            raise NearDedupError(f"{label}: origins.jsonl:{n}: split, file, line or source of "
                                 f"{key[0]}/{key[1]} differ from the package")
    summary.inputs_checked = len(origin)
    return summary
