"""Stage 1, pool: the input packages' samples and contents loaded from the index as columns,
the data files re-hashed against their manifests, and the samples grouped into nodes (one
content within one split) in decision order."""

from __future__ import annotations

import numpy as np

from near_dedup_core import index_store as db
from near_dedup_core.inputs import check_files as check_files
from near_dedup_core.inputs import data_files as data_files
from near_dedup_core.inputs import expected_digests as expected_digests
from near_dedup_core.inputs import file_digests as file_digests
from near_dedup_core.inputs import indexed_inputs as indexed_inputs
from near_dedup_core.package import Package
from near_dedup_core.scan.records import Nodes, Pool, Samples


def load_pool(snap: db.Snapshot, indexed_rows: list[db.IndexedPackage],
              pkgs: list[Package], domains: bool = False) -> Pool:
    """The pool's samples and contents as the snapshot holds them. ``indexed_rows`` are the
    snapshot's packages (`index_store.Snapshot.indexed_packages`), among which `indexed_inputs`
    found every input with the same manifest. Sample domains are read only when asked for
    (the guard's domain-specific units need them); the text digests are read for the report
    (`near_dedup_core.scan.write.text_digests`)."""
    indexed = {r.package_id: r for r in indexed_rows}
    pool_rows = [indexed[p.package_id] for p in pkgs]
    sample_id: list[str] = []
    splits: dict[str, int] = {}
    split: list[int] = []
    content: list[np.ndarray] = []
    sample_start = [0]
    for package in pool_rows:
        for rows in snap.pool_samples(package):
            ids, split_col, content_col = zip(*rows, strict=True)
            sample_id.extend(ids)
            split.extend([splits.setdefault(x, len(splits)) for x in split_col])
            content.append(np.asarray(content_col, dtype=np.int64))
        sample_start.append(len(sample_id))
    rowids = np.concatenate(content) if content else np.zeros(0, dtype=np.int64)
    del content
    contents = snap.content_columns(rowids)
    start = np.asarray(sample_start, dtype=np.int64)
    domain, domain_labels = None, None
    if domains:
        codes: dict[str | None, int] = {}
        domain = np.asarray([codes.setdefault(d, len(codes)) for package in pool_rows
                             for d in snap.package_column(package.rowid, "domain")],
                            dtype=np.int64)
        domain_labels = list(codes)
    samples = Samples(
        input_pos=np.repeat(np.arange(len(pkgs), dtype=np.int64), np.diff(start)),
        sample_id=sample_id, split=np.asarray(split, dtype=np.int64), split_labels=list(splits),
        content=np.searchsorted(contents.rowid, rowids), domain=domain,
        domain_labels=domain_labels)
    counts = snap.counts()
    return Pool(
        packages=pkgs, indexed=pool_rows, sample_start=start,
        package_batch={r.package_id: r.batch for r in indexed_rows}, samples=samples,
        contents=contents, scope_labels=snap.scope_labels(),
        index_packages=[{"package_id": r.package_id, "kind": r.kind,
                         "manifest_sha256": r.manifest_sha256, "batch": r.batch}
                        for r in indexed_rows],
        index_batches=counts.batches, index_contents=counts.contents)


def first_ingest_rank(contents: db.ContentColumns) -> np.ndarray:
    """Each content's rank in first-ingest order: (batch, content_id)."""
    n = len(contents.rowid)
    ids = contents.content_id
    if all(len(c) == 16 for c in ids):
        # big-endian halves compare as the bytes do
        halves = np.frombuffer(b"".join(ids), dtype=">u8").reshape(n, 2) if n else \
            np.zeros((0, 2), dtype=">u8")
        order = np.lexsort((halves[:, 1], halves[:, 0], contents.batch))
    else:
        batch = contents.batch.tolist()
        order = np.asarray(sorted(range(n), key=lambda i: (batch[i], ids[i])), dtype=np.int64)
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    return rank


def decision_order(pool: Pool) -> np.ndarray:
    """Sample indexes in decision order (docs/contract.md §4, scan): first-ingest order of the
    sample's content, then the batch that indexed the sample's package, then input position,
    then sample id (then report order, which the sort keeps)."""
    s = pool.samples
    n = len(s)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    rank = first_ingest_rank(pool.contents)[s.content]
    batch_of_input = np.asarray([pool.package_batch[p.package_id] for p in pool.packages],
                                dtype=np.int64)
    order = np.lexsort((s.input_pos, batch_of_input[s.input_pos], rank))
    # samples of one content within one package: by sample id
    r, p = rank[order], s.input_pos[order]
    same = (r[1:] == r[:-1]) & (p[1:] == p[:-1])
    if same.any():
        edges = np.flatnonzero(np.diff(np.concatenate(([0], same.astype(np.int8), [0]))))
        ids = s.sample_id
        for lo, hi in zip(edges[0::2].tolist(), (edges[1::2] + 1).tolist(), strict=True):
            order[lo:hi] = sorted(order[lo:hi].tolist(), key=lambda i: ids[i])
    return order


def build_nodes(pool: Pool) -> Nodes:
    """The pool's nodes in the order of each node's first sample in decision order."""
    s = pool.samples
    order = decision_order(pool)
    key = s.content[order] * max(len(s.split_labels), 1) + s.split[order]
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    node_rank = np.empty(len(first), dtype=np.int64)
    node_rank[np.argsort(first)] = np.arange(len(first))
    node_of = node_rank[inverse.reshape(-1)]
    by_node = np.argsort(node_of, kind="stable")
    members = order[by_node]
    start = np.zeros(len(first) + 1, dtype=np.int64)
    np.cumsum(np.bincount(node_of, minlength=len(first)), out=start[1:])
    heads = members[start[:-1]]
    return Nodes(content=s.content[heads], split=s.split[heads], split_labels=s.split_labels,
                 start=start, samples=members)
