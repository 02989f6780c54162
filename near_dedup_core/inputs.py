"""Input checks that the commands reading an indexed pool share (`scan` and `contamination`):
every input indexed with the same manifest, and the data files still those the manifests
list."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from near_dedup_core.errors import NearDedupError, where
from near_dedup_core.fsutil import sha256_file
from near_dedup_core.package import Package
from near_dedup_core.storage import is_url, parse_location

if TYPE_CHECKING:
    from near_dedup_core import index_store as db

def data_files(pkgs: list[Package]) -> list[str]:
    """Every data file of ``pkgs``, in the order `check_files` expects their digests."""
    return [pkg.file_url(entry.path) for pkg in pkgs for entry in pkg.files]


def expected_digests(pkgs: list[Package]) -> list[str]:
    """The manifests' sha256 of each of `data_files`, in that order."""
    return [entry.sha256 for pkg in pkgs for entry in pkg.files]


def file_digests(paths: list[str]) -> list[str]:
    """sha256 of each of `data_files`, one after the other (one core: the caller keeps the
    other)."""
    return [sha256_file(Path(p)) if not is_url(p) else _sha256_url(p) for p in paths]


def _sha256_url(url: str) -> str:
    """sha256 of a file on object storage, streamed."""
    location = parse_location(url)
    digest = hashlib.sha256()
    with location.open("") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def check_files(pkgs: list[Package], digests: list[str]) -> None:
    """A data file whose digest (sha256 of each of `data_files`, in order) differs from its
    manifest entry stops the scan: it changed since it was indexed."""
    jobs = [(pkg, entry) for pkg in pkgs for entry in pkg.files]
    for (pkg, entry), digest in zip(jobs, digests, strict=True):
        if digest != entry.sha256:
            raise NearDedupError(f"{where(pkg.package_id, entry.path)}: sha256 does not match "
                                 f"manifest.json (file changed after it was indexed)")


def indexed_inputs(indexed_rows: list[db.IndexedPackage], index_path: Path | str,
                   pkgs: list[Package]) -> dict[str, db.IndexedPackage]:
    """The index's packages by id, once every input is among them with the same manifest."""
    indexed = {r.package_id: r for r in indexed_rows}
    for pkg in pkgs:
        known = indexed.get(pkg.package_id)
        if known is None:
            raise NearDedupError(f"{where(pkg.package_id)}: not in index {index_path}; "
                                 f"index it first")
        if known.manifest_sha256 != pkg.manifest_sha256:
            raise NearDedupError(f"{where(pkg.package_id, 'manifest.json')}: indexed with "
                                 f"manifest sha256 {known.manifest_sha256[:12]}…, this one is "
                                 f"{pkg.manifest_sha256[:12]}…; index it first under a new id")
    return indexed
