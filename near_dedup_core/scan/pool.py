"""Stage 1, pool: the input packages' samples and contents loaded from the index, the data
files re-hashed against their manifests, and the samples grouped into nodes (one content
within one split) in decision order."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from near_dedup_core import index_store as db
from near_dedup_core.errors import NearDedupError, where
from near_dedup_core.fsutil import sha256_file
from near_dedup_core.package import Package
from near_dedup_core.scan.records import Node, Pool, Sample


def verify_files(pkgs: list[Package]) -> None:
    """Re-hash every data file of ``pkgs``; a file changed since it was indexed stops the
    scan."""
    jobs = [(pkg, entry) for pkg in pkgs for entry in pkg.files]
    with ThreadPoolExecutor(max_workers=2) as ex:
        digests = list(ex.map(lambda job: sha256_file(job[0].path / job[1].path), jobs))
    for (pkg, entry), digest in zip(jobs, digests):
        if digest != entry.sha256:
            raise NearDedupError(f"{where(pkg.package_id, entry.path)}: sha256 does not match "
                                 f"manifest.json (file changed after it was indexed)")


def load_pool(snap: db.IndexSnapshot, index_path: Path | str, pkgs: list[Package]) -> Pool:
    """The pool's samples and contents as the snapshot holds them; every input must be
    indexed with the same manifest."""
    rows = snap.indexed_packages()
    indexed = {r.package_id: r for r in rows}
    for pkg in pkgs:
        known = indexed.get(pkg.package_id)
        if known is None:
            raise NearDedupError(f"{where(pkg.package_id)}: not in index {index_path}; "
                                 f"index it first")
        if known.manifest_sha256 != pkg.manifest_sha256:
            raise NearDedupError(f"{where(pkg.package_id, 'manifest.json')}: indexed with "
                                 f"manifest sha256 {known.manifest_sha256[:12]}…, this one is "
                                 f"{pkg.manifest_sha256[:12]}…; index it first under a new id")
    samples: list[Sample] = []
    for pos, pkg in enumerate(pkgs):
        package = indexed[pkg.package_id]
        for r in snap.package_sources(package):
            samples.append(Sample(pos, pkg.package_id, package.batch, r.sample_id, r.split,
                                  r.file, r.line, r.position, r.text_sha256, r.domain, r.source,
                                  r.content))
    content = snap.content_rows(sorted({s.content for s in samples}))
    counts = snap.counts()
    return Pool(
        packages=pkgs, package_batch={r.package_id: r.batch for r in rows}, samples=samples,
        content=content, scope_labels=snap.scope_labels(),
        index_packages=[{"package_id": r.package_id, "kind": r.kind,
                         "manifest_sha256": r.manifest_sha256, "batch": r.batch} for r in rows],
        index_batches=counts.batches, index_contents=counts.contents)


def order_key(pool: Pool, s: Sample) -> tuple:
    """Decision order (SPEC §4 scan): first-ingest order of the sample's content, then the
    batch that indexed the sample's package, then input position, then sample id."""
    row = pool.content[s.content]
    return (row.batch, row.content_id, s.package_batch, s.input_pos, s.sample_id)


def build_nodes(pool: Pool) -> list[Node]:
    """The pool's nodes in the order of each node's first sample in decision order."""
    by_key: dict[tuple[int, str], Node] = {}
    for s in sorted(pool.samples, key=lambda s: order_key(pool, s)):
        node = by_key.get((s.content, s.split))
        if node is None:
            node = by_key[(s.content, s.split)] = Node(s.content, s.split)
        node.samples.append(s)
    return list(by_key.values())  # insertion order = order of each node's first sample
