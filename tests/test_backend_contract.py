"""The backend contract (`index_store.protocols`) run against every backend: the same index,
built by `index` on SQLite, PostgreSQL and Iceberg, answers every method of `IndexBackend`,
`Snapshot`, `TextReader`, `RawTextLookup` and `Batch` with the same values (only row ids a
backend numbers itself are left out of the comparison), and a batch left by an error
changes nothing."""

from __future__ import annotations

import hashlib
import importlib
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from helpers import cpt, index, index_bytes, make_package, stdlib_paragraphs

from near_dedup_core.config import NearDedupConfig
from near_dedup_core.errors import NearDedupError
from near_dedup_core.index_store import (
    IndexedPackage,
    open_index,
    open_known_texts,
    open_snapshot,
    open_texts,
)
from near_dedup_core.normalize import normalize
from near_dedup_core.signature import band_keys

#: What every backend must answer alike, filled by the first backend that runs.
EXPECTED: dict[str, object] = {}


@pytest.fixture(scope="module")
def built(backend, new_index_location, tmp_path_factory) -> tuple[str, dict[str, str]]:
    """An index of the module's backend holding two batches: ``cpt-a``, then ``cpt-b`` (one
    exact copy of an ``a`` text, one near copy, one new text); the texts by sample id."""
    folder = tmp_path_factory.mktemp(f"contract-{backend}")
    prose = stdlib_paragraphs()
    texts = {"a0": prose[0], "a1": prose[1], "a2": prose[2],
             "b0": prose[0], "b1": prose[1].replace(" the ", " a ", 1), "b2": prose[3],
             "b3": "short"}
    a = make_package(folder, "cpt-a", {"train": [cpt(s, texts[s]) for s in ("a0", "a1", "a2")]})
    b = make_package(folder, "cpt-b", {"train": [cpt(s, texts[s]) for s in ("b0", "b1")],
                                       "test": [cpt(s, texts[s]) for s in ("b2", "b3")]})
    location = new_index_location(folder)
    index(location, a)
    index(location, b)
    return location, texts


def same_everywhere(name: str, value: object) -> None:
    """``value`` equals what the first backend answered for ``name``."""
    assert EXPECTED.setdefault(name, value) == value, name


def test_the_backend_answers_what_it_is(backend, built):
    location, _ = built
    idx = open_index(location)
    assert open_index(idx) is idx
    assert idx.kind == {"sqlite": "sqlite", "postgresql": "postgres", "iceberg": "iceberg"}[backend]
    assert ":" not in idx.label.split("@")[0].split("://")[-1]  # never a password
    assert isinstance(idx.inline_readers_close, bool)
    assert (idx.file is not None) == (backend == "sqlite")
    assert open_index(idx.location).label == idx.label
    for module in idx.worker_modules:
        importlib.import_module(module)
    assert isinstance(idx.read_ahead(), bool)
    with idx.errors():
        pass
    idx.raise_if_damaged(ValueError("a value the index does not hold"))  # not damaged
    idx.check_target([])


def test_check_and_maintenance(backend, built):
    location, _ = built
    idx = open_index(location)
    checked = idx.check()
    same_everywhere("check counts", tuple(checked)[1:5])
    if backend == "iceberg":
        assert idx.maintain("compact")
        assert idx.maintain("expire", 0.0)
        assert tuple(idx.check())[1:5] == tuple(checked)[1:5]
    else:
        with pytest.raises(NearDedupError, match="is for an index kept as Iceberg tables"):
            idx.maintain("compact")


def test_the_snapshot_reads(backend, built):
    location, texts = built
    config = NearDedupConfig()
    with open_snapshot(location, config) as snap:
        assert snap.join_executor is None
        snap.verify_pages()
        meta = snap.meta()
        same_everywhere("meta", {k: v for k, v in meta.items()
                                 if k not in ("created_at", "bands_merged_through",
                                              "iceberg_buckets")})
        packages = snap.indexed_packages()
        assert all(isinstance(p, IndexedPackage) for p in packages)
        same_everywhere("packages", [(p.package_id, p.kind, p.batch, p.records)
                                     for p in packages])
        counts = snap.counts()
        same_everywhere("counts", tuple(counts))
        labels = snap.scope_labels()
        same_everywhere("scopes", sorted(labels.values()))
        by_id = {p.package_id: p for p in packages}
        b = by_id["cpt-b"]
        pooled = [row for rows in snap.pool_samples(b, batch=2) for row in rows]
        assert [len(rows) for rows in snap.pool_samples(b, batch=2)] == [2, 2]
        same_everywhere("pool samples", [(s, split) for s, split, _ in pooled])
        rows = [row for part in snap.sample_rows(b) for row in part]
        same_everywhere("sample rows", [r[:6] for r in rows])
        assert [r[6] for r in rows] == [c for _, _, c in pooled]
        assert snap.sample_location(b, 2) == (rows[2][3], rows[2][4])
        contents = {s: c for s, _, c in pooled}
        ids = np.asarray(sorted(set(contents.values())), dtype=np.int64)
        columns = snap.content_columns(ids[::-1])
        assert columns.rowid.tolist() == ids.tolist()
        assert columns.has_signature.tolist() == [c != contents["b3"] for c in ids.tolist()]
        same_everywhere("signatures", sorted(map(bytes, columns.signatures[columns.has_signature])))
        # the texts, by every reader
        for reader in (snap, open_texts(idx_location(snap, location))):
            got = reader.texts([contents["b2"], contents["b0"]])
            assert got == {contents["b2"]: normalize(texts["b2"]),
                           contents["b0"]: normalize(texts["b0"])}
            assert reader.utf8_texts([contents["b3"]]) == [normalize("short").encode()]
            shipped = reader.shipped([contents["b1"]])
            assert shipped.texts([contents["b1"]]) == {contents["b1"]: normalize(texts["b1"])}
            origins = list(reader.package_origins(b.rowid))
            same_everywhere("origins", [o[:4] for o in origins])
            same_everywhere("domains", reader.package_column(b.rowid, "domain"))
            with pytest.raises(ValueError):
                reader.package_column(b.rowid, "text_z")
            if reader is not snap:
                reader.close()
        # history: the exact copy b0 is a's content, split test/train, and b1 shares bands
        splits = snap.content_splits([contents["b0"], contents["b2"]])
        same_everywhere("splits", [s for _, s in splits])
        assert {c for c, _ in splits} == {contents["b0"], contents["b2"]}
        keys = band_keys(columns.signatures[columns.has_signature], config.bands, config.rows)
        probes = np.unique(keys.reshape(-1))
        pool_ids = sorted(set(contents.values()))
        pool_nodes = {(c, split) for _, split, c in pooled}
        hits = snap.history_band_hits(probes, pool_ids, pool_nodes)
        found = sorted(set(zip(hits.keys.tolist(), hits.contents.tolist(), strict=True)))
        assert all(k in set(probes.tolist()) for k, _ in found)
        a1 = next(c for rows in snap.pool_samples(by_id["cpt-a"]) for s, _, c in rows
                  if s == "a1")
        assert a1 in {c for _, c in found}  # the near copy's history
        assert not {c for _, c in found} & set(pool_ids)  # b0 is in a's split: no history
        same_everywhere("history hits", len(found))
        outside = snap.outside_sources([contents["b0"]], {"cpt-b"})
        same_everywhere("outside", [(o.package_id, o.sample_id, o.split) for o in outside])
        # provenance (`index find`)
        keys_ = snap.scope_keys()
        assert sorted(keys_) == sorted(labels)
        same_everywhere("scope keys", sorted(keys_.values()))
        dates = snap.batch_dates()
        assert sorted(dates) == [1, 2] and all(d.endswith("Z") for d in dates.values())
        b0_id = bytes(columns.content_id[ids.tolist().index(contents["b0"])])
        assert snap.content_rows([b0_id, b"\0" * 16, b0_id]) == {b0_id: contents["b0"]}
        sources = snap.content_sources([contents["b0"], contents["b3"], contents["b0"]])
        same_everywhere("content sources", [
            (s.sample_id, s.split, s.text_sha256.hex(), s.domain) for s in sources])
        assert [(s.content, s.package) for s in sources] == sorted(
            [(contents["b0"], by_id["cpt-a"].rowid), (contents["b0"], b.rowid),
             (contents["b3"], b.rowid)])
        assert sources[0].text_sha256 == hashlib.sha256(texts["a0"].encode()).digest()


def idx_location(snap, location: str) -> str:
    """The worker's location the snapshot names (credentials kept)."""
    assert open_index(snap.location).label == open_index(location).label
    return snap.location


def test_the_raw_text_lookups(built):
    location, texts = built
    shas = [hashlib.sha256(texts[s].encode()).digest() for s in ("a0", "b2")] + [b"\0" * 32]
    for cached in (False, True):
        known = open_known_texts(location, cached)
        found = known.contents(shas)
        known.close()
        assert sorted(sha for sha, _ in found) == sorted(shas[:2])
        same_everywhere("raw texts", sorted((shas.index(sha), key) for sha, key in found))


def test_a_batch_left_by_an_error_changes_nothing(backend, built):
    """Every read of `Batch` inside an open batch, then writes; an error leaves the index
    byte for byte as it was, and the next batch appends as if nothing happened."""
    location, texts = built
    idx = open_index(location)
    before = index_bytes(location)
    config = NearDedupConfig()
    with idx.snapshot() as snap:
        newest = snap.counts().contents

    class Stop(Exception):
        pass

    with pytest.raises(Stop), idx.errors(), idx.batch(config, "2026-12-06T00:00:00Z") as batch:
        assert batch.reader_location is not None
        assert isinstance(batch.served, bool) and batch.seq is None
        same_everywhere("batch meta", {k: v for k, v in batch.meta().items()
                                       if k not in ("created_at", "bands_merged_through",
                                                    "iceberg_buckets")})
        packages = batch.indexed_packages()
        assert sorted(packages) == ["cpt-a", "cpt-b"]
        scopes = batch.scope_ids()
        assert len(scopes) == 1
        assert batch.max_content_rowid() == newest
        targets = batch.ref_targets(packages["cpt-a"].rowid)
        assert sorted(targets) == ["a0", "a1", "a2"]
        known = batch.known_contents([b"\0" * 16])
        assert known == {}
        sha = hashlib.sha256(texts["a0"].encode()).digest()
        assert [c for (_, _), c in batch.known_raw_texts([sha]).items()] == [targets["a0"].content]
        assert batch.newest_dictionary() is None  # three texts train no dictionary
        seq = batch.add_batch("2026-12-06T00:00:00Z", "test", ["cpt-c"])
        assert seq == 3 and batch.seq == 3
        batch.add_package("cpt-c", "cpt", "0" * 64, seq, 0, "{}")
        batch.add_scope("other", "other scope")
        batch.add_takedown("takedown/000001", "{}")
        assert batch.meta()["takedown/000001"] == "{}"
        batch.upgrade_schema(batch.meta())
        with ThreadPoolExecutor(1) as executor:
            chunks = batch.band_writer(executor, 1)
            assert (chunks is None) == (backend != "iceberg")
            assert chunks is None or chunks.chunk_rows > 0
        raise Stop
    assert index_bytes(location) == before



def test_nothing_outside_index_store_names_a_backend():
    """Stages ask the backend object: no backend class, no backend module and no URL
    sniffing of an index outside `index_store` (import-linter checks the layers)."""
    root = Path(__file__).resolve().parents[1]
    names = ("SqliteIndex", "PostgresIndex", "IcebergIndex", "index_store.iceberg",
             "index_store.postgres", "index_store.sqlite", "is_postgres_url",
             "index_store.texts import is_url")
    for path in [*root.glob("near_dedup_core/**/*.py"), *root.glob("near_dedup_assets/*.py")]:
        if "index_store" in path.parts:
            continue
        text = path.read_text(encoding="utf-8")
        assert not [n for n in names if n in text], path


def test_the_import_floors_hold():
    """`lint-imports` (the contracts in pyproject.toml, drawn in docs/architecture.md) passes:
    no lower floor imports a stage, no stage imports the CLI, the library never imports
    Dagster, and the modules of `index_store` import each other without a cycle."""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([str(Path(sys.executable).with_name("lint-imports"))], cwd=root,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(("index", "preloaded"), [
    ("postgresql://u:p@h/d", ("near_dedup_core.index_store.postgres",)),
    ("index.sqlite", ()),
    ("iceberg:///tmp/folder", ()),
    ("mysql://h/d", ()),  # refused by the command itself, later
])
def test_a_pool_preloads_what_the_backend_names(monkeypatch, index, preloaded):
    """The forkserver a command starts early preloads the index backend's `worker_modules`
    (asked of the backend object, not read off the URL) before the stage's own modules."""
    from near_dedup_core import runtime

    started: list[tuple[str, ...]] = []
    monkeypatch.setattr(runtime, "POOL_RECORDS", 0)
    monkeypatch.setattr(runtime, "start_forkserver", started.append)
    sample = Path(__file__).resolve().parents[1] / "samples" / "cpt" / "2026-11-25" / "cpt-v1"
    runtime._start_pool_early(("near_dedup_core.scan",), [sample], index)
    assert started == [(*preloaded, "near_dedup_core.scan")]
