"""`index`: appending batches of snapshot packages to the persistent index, through the CLI.

Every refusal exits with one line on stderr and leaves the index byte-identical (a new index
path: no file at all); one command is one transaction, also under SIGKILL; known content only
gains source rows; first-ingest order does not depend on the order of ``--inputs``.
Texts are paragraphs of the stdlib docstrings (see test_signature.stdlib_paragraphs).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import helpers
import numpy as np
import pytest
from helpers import (
    REPO,
    SAMPLES,
    drop_every,
    make_package,
    reverse_every,
    run_cli,
    stdlib_paragraphs,
    tree_bytes,
    update_manifest,
)

from near_dedup_core import ALGORITHM_VERSION, index_store
from near_dedup_core import normalize as normalize_module
from near_dedup_core.compare import content_id, cpt_scope
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.fsutil import sha256_file
from near_dedup_core.ingest import batch as ingest_batch
from near_dedup_core.ingest import run as ingest_run
from near_dedup_core.ingest import work as ingest_work
from near_dedup_core.normalize import normalize
from near_dedup_core.signature import MinHasher, exact_jaccard

TABLES = ("meta", "batches", "packages", "scopes", "contents", "bands", "sources")
P = stdlib_paragraphs()


# --------------------------------------------------------------------------- helpers


def docs(prefix: str, texts, start: int = 0) -> list[dict]:
    """CPT records with ids ``<prefix><n>``, a domain and a source reference."""
    return [{"id": f"{prefix}{start + i}", "text": text, "domain": "docs",
             "source": {"dataset": "stdlib-docstrings", "row": start + i}}
            for i, text in enumerate(texts)]


def qa(prefix: str, texts) -> list[dict]:
    """SFT records: one summarization exchange per text."""
    return [{"id": f"{prefix}{i}", "domain": "docs", "task": "summarize",
             "system": "You summarize documentation.", "material": {"text": text},
             "messages": [{"role": "user", "content": "Summarize the material."},
                          {"role": "assistant", "content": text[:200]}]}
            for i, text in enumerate(texts)]


def jaccard(a: str, b: str) -> float:
    sa, sb = MinHasher(128, 1, 5).shingle_sets([normalize(a), normalize(b)])
    return exact_jaccard(sa, sb)


def index_args(index: Path | str, *inputs: Path, config: Path | None = None,
               workers: int = 1) -> list:
    cfg = ["--config", config] if config else []
    return ["--quiet", "--index", index, *cfg, "index", "--inputs", *inputs,
            "--workers", workers]


def index_ok(index: Path | str, *inputs: Path, config: Path | None = None,
             workers: int = 1) -> str:
    code, out, err = run_cli(*index_args(index, *inputs, config=config, workers=workers))
    assert code == 0, err
    return out


def refused(argv: list, code: int, *fragments: str) -> str:
    """The command exits ``code`` with exactly one stderr line holding every fragment."""
    return helpers.refused(argv, *fragments, code=code)


def digest(path: Path) -> str | None:
    return sha256_file(path) if path.exists() else None


def leftovers(index: Path) -> list[str]:
    """Files beside ``index`` that belong to it: the index, its SQLite side files, its lock
    and temporary siblings."""
    return sorted(p.name for p in index.parent.iterdir()
                  if p.name.startswith((index.name, f".{index.name}")))


def temp_siblings(index: Path) -> list[str]:
    return sorted(p.name for p in index.parent.iterdir()
                  if p.name.startswith(f".{index.name}.tmp"))


def index_state(index: Path) -> dict:
    """What a reader of the index sees: integrity, row counts, packages and batches (read as
    the tool reads, leaving no -wal/-shm file behind)."""
    con = index_store.connect_reader(index)
    try:
        return {
            "integrity": con.execute("PRAGMA integrity_check").fetchone()[0],
            "counts": {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                       for t in TABLES},
            "packages": con.execute("SELECT package_id, manifest_sha256, batch, records "
                                    "FROM packages ORDER BY package_id").fetchall(),
            "batches": con.execute("SELECT seq, packages FROM batches ORDER BY seq").fetchall(),
            "meta": dict(con.execute("SELECT key, value FROM meta WHERE key != 'created_at'")),
        }
    finally:
        con.close()


def contents_by_id(index: Path) -> dict[bytes, tuple]:
    """content_id -> (first batch, normalized length, shingle-set size, signature, stored
    normalized text). Texts are decompressed: their bytes depend on the batch's dictionary."""
    con = index_store.connect_reader(index)
    try:
        reader = index_store.TextDecoder(con)
        return {cid: (batch, chars, shingles, sig, reader.text(blob, dictionary))
                for cid, batch, chars, shingles, sig, blob, dictionary in con.execute(
                    "SELECT content_id, batch, norm_chars, shingles, signature, text_z, "
                    "dictionary FROM contents")}
    finally:
        con.close()


def own_files(index: Path, names: list[str] | None = None) -> list[str]:
    """``leftovers`` without SQLite's -wal/-shm side files, which any reader of a WAL-mode
    database may create and which carry no data once the last writer has closed."""
    side = {index.name + "-wal", index.name + "-shm"}
    return [n for n in (leftovers(index) if names is None else names) if n not in side]


class Unchanged:
    """Snapshot of an index path (file bytes or absence, its side files) to compare after;
    of a PostgreSQL or Iceberg index (a URL), everything it stores (`helpers.index_bytes`)."""

    def __init__(self, index: Path | str) -> None:
        file = index_store.open_index(index).file
        self.index: Path | str = index if file is None else file
        if file is None:
            self.stored = helpers.index_bytes(index)
            return
        index = file
        self.digest = digest(index)
        self.files = leftovers(index)
        self.state = index_state(index) if self.digest else None

    def check(self) -> None:
        if not isinstance(self.index, Path):
            assert helpers.index_bytes(self.index) == self.stored, "the index changed"
            return
        if self.digest is None:
            assert leftovers(self.index) == [], "a refused new index must leave no file"
            return
        assert digest(self.index) == self.digest, "index file changed"
        assert index_state(self.index) == self.state
        assert own_files(self.index) == own_files(self.index, self.files), "files were left"


def write_config(path: Path, **values) -> Path:
    path.write_text(json.dumps(values), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- shared world


@dataclass
class World:
    root: Path
    v1: Path          # cpt-v1: 24 train + 2 validation paragraphs
    v2: Path          # cpt-v2: 6 of v1's texts, 6 near copies of v1's, 10 new
    sft: Path         # sft-v1
    base: Path        # an index holding cpt-v1 (batch 1)
    report: Path      # a frozen report of [cpt-v1]
    mixture: Path     # a mixture package built on that report


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    root = tmp_path_factory.mktemp("index-world")
    pkgs = root / "snapshots"
    v1 = make_package(pkgs, "cpt-v1", {"train": docs("a", P[:24]),
                                       "validation": docs("va", P[24:26])})
    near = [drop_every(p, 30) for p in P[7:13]]
    assert all(0.9 <= jaccard(p, q) < 1 for p, q in zip(P[7:13], near, strict=False))
    v2 = make_package(pkgs, "cpt-v2", {
        "train": docs("b", P[:6]) + docs("b", near, 6)
        + docs("b", P[30:40], 12),
        "validation": docs("vb", P[42:44])}, created_at="2026-11-26T00:00:00Z")
    sft = make_package(pkgs, "sft-v1", {"train": qa("q", P[50:56])}, kind="sft")
    base = root / "indexes" / "cpt-base.sqlite"
    base.parent.mkdir()
    index_ok(base, v1)
    report = root / "reports" / "near-cpt-v1"
    code, _, err = run_cli("--quiet", "--index", base, "scan", "--inputs", v1,
                           "--output", report, "--workers", 1)
    assert code == 0, err
    mix_config = write_config(root / "mix.json", name="mix", kind="cpt", inputs=[str(v1)],
                              target_records=5, group_by="domain",
                              strategy={"type": "temperature", "temperature": 2.0},
                              quality={"min_chars": 0}, allow_shortfall=False,
                              redistribute=True, seed=7, near_dedup_report=str(report))
    mixture = root / "mixtures" / "mix"
    code, _, err = run_cli("--quiet", "mixture", "build", mix_config, "--output", mixture)
    assert code == 0, err
    return World(root, v1, v2, sft, base, report, mixture)


@pytest.fixture
def index(world, tmp_path) -> Path:
    """A private copy of the base index (cpt-v1 in batch 1)."""
    path = tmp_path / "idx" / "cpt.sqlite"
    path.parent.mkdir()
    shutil.copyfile(world.base, path)
    return path


@pytest.fixture(scope="module")
def base_index(world, backend, new_index_location, tmp_path_factory) -> Path | str:
    """cpt-v1 in batch 1 of an index of the module's backend, indexed once (SQLite: the
    world's base file, copied by ``any_index``)."""
    if backend == "sqlite":
        return world.base
    location = new_index_location(tmp_path_factory.mktemp(f"base-{backend}"))
    index_ok(location, world.v1)
    return location


@pytest.fixture
def any_index(base_index, tmp_path) -> Path | str:
    """cpt-v1 in batch 1 on each backend, for a command that must leave it unchanged: a
    private copy of the SQLite file; the module's one PostgreSQL database or Iceberg folder
    (each test checks that its command changed nothing)."""
    if not isinstance(base_index, Path):
        return base_index
    path = tmp_path / "idx" / "cpt.sqlite"
    path.parent.mkdir()
    shutil.copyfile(base_index, path)
    return path


def label(index: Path | str) -> str:
    """How messages name ``index`` (a PostgreSQL URL without its password)."""
    return index_store.open_index(index).label


@pytest.fixture
def new_index(tmp_path) -> Path:
    """A path where no index exists yet, in an existing folder of its own."""
    folder = tmp_path / "fresh"
    folder.mkdir()
    return folder / "cpt.sqlite"


# --------------------------------------------------------------------------- happy path


def test_two_batches_through_the_cli(world, tmp_path):
    index = tmp_path / "cpt-near.sqlite"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = subprocess.run([sys.executable, "-m", "near_dedup_core", "--index", str(index),
                          "index", "--inputs", str(world.v1), "--workers", "2"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout == (f"index {index}: batch 1 added cpt-v1: 26 records, 26 new texts, "
                          f"0 repeats of texts seen before\n")
    # progress (on stderr) only if the batch took over a second
    assert all(line.startswith("index: records: ") for line in run.stderr.splitlines())

    out = index_ok(index, world.v2)
    assert out == (f"index {index}: batch 2 added cpt-v2: 24 records, 18 new texts, "
                   f"6 repeats of texts seen before\n")
    state = index_state(index)
    assert state["integrity"] == "ok"
    v1_sha = sha256_file(world.v1 / "manifest.json")
    v2_sha = sha256_file(world.v2 / "manifest.json")
    assert state["packages"] == [("cpt-v1", v1_sha, 1, 26), ("cpt-v2", v2_sha, 2, 24)]
    assert [seq for seq, _ in state["batches"]] == [1, 2]
    assert state["counts"]["contents"] == 44 and state["counts"]["sources"] == 50
    assert state["counts"]["scopes"] == 1
    assert state["meta"]["kind"] == "cpt" and state["meta"]["format"] == "near-dedup-index"
    assert temp_siblings(index) == []


SAMPLE_POOLS = {
    "cpt": [[SAMPLES / "cpt/2026-11-25/cpt-v1"], [SAMPLES / "cpt/2026-11-26/cpt-v2"]],
    "sft": [[SAMPLES / "sft/sft-v1", SAMPLES / "sft/sft-v2"]],  # sft-v2 depends on sft-v1
}


@pytest.mark.parametrize("kind", ["cpt", "sft"])
def test_bundled_samples_index_and_reindex(kind, index_location, tmp_path):
    """The bundled samples indexed batch by batch into an index of each backend, then all
    again: nothing to do, the index unchanged."""
    index = index_location
    name = label(index)
    config = REPO / "config" / "near-dedup.json"
    manifests = {}
    known_sources = []
    for batch, inputs in enumerate(SAMPLE_POOLS[kind], start=1):
        ids = []
        for pkg in inputs:
            manifest = json.loads((pkg / "manifest.json").read_text(encoding="utf-8"))
            manifests[manifest["package_id"]] = (pkg, manifest)
            ids.append(manifest["package_id"])
        out = index_ok(index, *inputs, config=config)
        records = sum(f["records"] for pid in ids for f in manifests[pid][1]["files"])
        assert out.startswith(f"index {name}: batch {batch} added {', '.join(ids)}: "
                              f"{records:,} records, "), out
        known_sources.append(int(out.split(" new texts, ")[1].split(" ")[0].replace(",", "")))
    assert known_sources[-1] > 0, "later versions repeat earlier content"
    state = helpers.index_state(index)  # after `index check`'s invariants
    assert state["meta"]["kind"] == kind and state["meta"]["format"] == "near-dedup-index"
    assert state["packages"] == [
        (pid, kind, sha256_file(pkg / "manifest.json"), batch,
         sum(f["records"] for f in manifest["files"]))
        for batch, inputs in enumerate(SAMPLE_POOLS[kind], start=1)
        for pid, (pkg, manifest) in sorted(manifests.items()) if pkg in inputs]
    batches, packages, _, sources = state["counts"]
    assert (batches, packages) == (len(SAMPLE_POOLS[kind]), len(manifests))
    assert sources == sum(p[-1] for p in state["packages"])
    before = Unchanged(index)
    every = [p for inputs in SAMPLE_POOLS[kind] for p in inputs]
    out = index_ok(index, *every, config=config)
    assert out == (f"index {name}: nothing to do, already indexed with the same manifest: "
                   f"{', '.join(manifests)}\n")
    before.check()


def test_bundled_sft_v2_needs_sft_v1_in_the_same_command(new_index):
    before = Unchanged(new_index)
    refused(index_args(new_index, SAMPLES / "sft/sft-v2"), 1, "package sft-v2, manifest.json: "
            "lineage.depends_on names package sft-v1, which is not among the inputs")
    before.check()


def test_reindexing_the_same_package_is_a_no_op(world, any_index):
    before = Unchanged(any_index)
    out = index_ok(any_index, world.v1)
    assert out == (f"index {label(any_index)}: nothing to do, already indexed with the same "
                   f"manifest: cpt-v1\n")
    before.check()


def test_a_batch_skips_already_indexed_packages_and_says_so(world, index):
    out = index_ok(index, world.v1, world.v2)
    assert out.startswith(f"index {index}: batch 2 added cpt-v2: 24 records")
    assert out.endswith("; already indexed: cpt-v1\n")
    assert [p[:1] + p[2:3] for p in index_state(index)["packages"]] == [("cpt-v1", 1),
                                                                       ("cpt-v2", 2)]


def test_known_content_gains_sources_without_being_signed_again(index, tmp_path, monkeypatch):
    signed: list[str] = []
    normalized: list[str] = []
    real_sign, real_normalize = ingest_work.sign, normalize_module.normalize_spans

    def spy(params, texts, *rest):
        signed.extend(texts)
        return real_sign(params, texts, *rest)

    def normalize_spy(texts):
        normalized.extend(texts)
        return real_normalize(texts)

    monkeypatch.setattr(ingest_work, "sign", spy)
    monkeypatch.setattr(normalize_module, "normalize_spans", normalize_spy)  # as work calls it
    new = list(P[60:63])
    records = (docs("c", P[:4])                 # contents of cpt-v1 (batch 1)
               + docs("c", new, 4)              # three new contents
               + docs("c", [new[0], P[0]], 7))  # again: new in this batch, and known
    pkg = make_package(tmp_path, "cpt-v3", {"train": records})
    before_state, before_rows = index_state(index), contents_by_id(index)

    out = index_ok(index, pkg)
    assert out == (f"index {index}: batch 2 added cpt-v3: 9 records, 3 new texts, "
                   f"6 repeats of texts seen before\n")
    assert sorted(signed) == sorted(normalize(t) for t in new)  # each new text signed once
    assert not {normalize(t) for t in P[:4]} & set(signed)
    assert not set(P[:4]) & set(normalized), "a known raw text is not even normalized again"
    counts, after_counts = before_state["counts"], index_state(index)["counts"]
    assert after_counts["contents"] == counts["contents"] + 3
    assert after_counts["sources"] == counts["sources"] + 9
    after_rows = contents_by_id(index)
    assert {cid: after_rows[cid] for cid in before_rows} == before_rows  # batch 1 rows untouched
    assert sorted(after_rows[cid][0] for cid in set(after_rows) - set(before_rows)) == [2, 2, 2]


def test_a_batch_asks_for_the_known_contents_of_several_blocks_at_once(index_location,
                                                                       tmp_path, monkeypatch):
    """Texts the index holds under other raw texts (upper-cased), one in each block of four
    records, beside new texts: the writer asks the index for the contents of every block
    whose result is in (inline, one worker: the whole window) in one call
    (`BatchWriter._known_contents`), no content twice, and each upper-cased text is a repeat
    of its content, on every backend."""
    first = make_package(tmp_path, "cpt-v1", {"train": docs("a", P[:12])})
    index_ok(index_location, first)
    records = []
    for i in range(12):
        records += docs("b", [P[i].upper(), *P[20 + 3 * i:23 + 3 * i]], 4 * i)
    second = make_package(tmp_path, "cpt-v2", {"train": records})
    monkeypatch.setattr(ingest_batch, "BLOCK_LINES", 4)
    asked: list[list[bytes]] = []
    real_init = ingest_batch.BatchWriter.__init__

    def init(self, store, *args, **kwargs):
        real_init(self, store, *args, **kwargs)
        real = store.known_contents

        def spy(ids):
            asked.append(list(ids))
            return real(ids)

        store.known_contents = spy

    monkeypatch.setattr(ingest_batch.BatchWriter, "__init__", init)
    out = index_ok(index_location, second)
    assert out.endswith("batch 2 added cpt-v2: 48 records, 36 new texts, 12 repeats of "
                        "texts seen before\n")
    window = ingest_batch._window(1)
    assert 1 < len(asked) <= -(-12 // window)
    ids = [c for call in asked for c in call]
    assert len(ids) == len(set(ids)) == 48


def _bytes_written() -> int:
    """Bytes this process has handed to write calls so far (Linux's ``/proc/self/io``)."""
    with open("/proc/self/io") as io_stats:
        return next(int(line.split()[1]) for line in io_stats if line.startswith("wchar:"))


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux's /proc/self/io")
def test_an_appended_batch_writes_its_pages_without_a_statement_journal(index, tmp_path):
    # 24 known contents under 256 new ids each: 6,144 source rows, 64 to a statement. Each page
    # a batch changes reaches the WAL once and the index once (the checkpoint at the end): the
    # process writes 2.3 times what the index grows by. A statement journal, a copy of every
    # page each statement changes, made that 14 times.
    records = [{"id": f"c{k}-{i}", "text": t} for k in range(256) for i, t in enumerate(P[:24])]
    pkg = make_package(tmp_path, "cpt-v3", {"train": records})
    size = index.stat().st_size
    before = _bytes_written()
    out = index_ok(index, pkg)
    written = _bytes_written() - before
    assert "6,144 records, 0 new texts" in out
    grown = index.stat().st_size - size
    assert grown > 0 and written < 3 * grown, (written, grown)


def test_each_later_dictionary_group_uses_a_dictionary_trained_ahead(tmp_path, monkeypatch):
    """Six blocks of 150 records, two blocks per dictionary group, trained one block ahead:
    block 0 trains the first group's dictionary, block 1 the second's, block 3 the third's;
    block 5 trains one for a group that never starts, which is not stored. One or two workers
    write the same rows, every text reads back, and the index passes its check."""
    monkeypatch.setattr(ingest_batch, "BLOCK_LINES", 150)
    monkeypatch.setattr(ingest_batch, "DICT_GROUP", 2)
    monkeypatch.setattr(ingest_batch, "DICT_LEAD", 1)
    texts = [f"Record {i}. {P[i % len(P)]} {P[(i * 7 + 1) % len(P)]}" for i in range(900)]
    pkg = make_package(tmp_path / "pkgs", "cpt-a", {"train": docs("a", texts)})
    trained = [index_store.train_text_dictionary([normalize(t).encode()
                                                  for t in texts[lo:lo + 150]])
               for lo in (0, 150, 450)]
    assert all(d is not None for d in trained)
    found = []
    for workers in (1, 2):
        index = tmp_path / f"workers-{workers}.sqlite"
        index_ok(index, pkg, workers=workers)
        con = sqlite3.connect(f"file:{index}?mode=ro", uri=True)
        try:
            assert [d for (d,) in con.execute("SELECT data FROM dictionaries ORDER BY id")
                    ] == trained
            assert con.execute("SELECT dictionary, min(id), max(id), count(*) FROM contents "
                               "GROUP BY dictionary ORDER BY dictionary").fetchall() == [
                (1, 1, 300, 300), (2, 301, 600, 300), (3, 601, 900, 300)]
        finally:
            con.close()
        rows = contents_by_id(index)
        assert sorted(row[4] for row in rows.values()) == sorted(normalize(t) for t in texts)
        found.append(rows)
        code, _, err = run_cli("--index", index, "index", "check")
        assert code == 0, err
    assert found[0] == found[1]


def test_a_batch_too_small_to_train_a_dictionary_compresses_with_the_newest(tmp_path,
                                                                           monkeypatch):
    """A cumulative snapshot (the first batch's records again under new ids, and 20 new
    texts, too few to train on) compresses its new texts with the dictionary the first
    batch trained, whatever the number of workers (in blocks of 40 lines, so that with two
    workers the blocks sent while the first one is under way come back uncompressed and
    are compressed by the main process); they read back, and the index passes its check."""
    first = [f"Record {i}. {P[i % len(P)]} {P[(i * 7 + 1) % len(P)]}" for i in range(300)]
    new = [f"Note {i}. {P[(i * 11 + 3) % len(P)]} {P[(i * 5 + 2) % len(P)]}" for i in range(20)]
    a = make_package(tmp_path / "pkgs", "cpt-a", {"train": docs("a", first)})
    b = make_package(tmp_path / "pkgs", "cpt-b", {"train": docs("b", [
        t for k in range(20) for t in (*first[15 * k:15 * k + 15], new[k])])})
    found = []
    for workers in (1, 2):
        index = tmp_path / f"workers-{workers}.sqlite"
        index_ok(index, a, workers=workers)  # one block: it trains the dictionary
        with monkeypatch.context() as m:
            m.setattr(ingest_batch, "BLOCK_LINES", 40)
            assert "20 new texts" in index_ok(index, b, workers=workers)
        con = sqlite3.connect(f"file:{index}?mode=ro", uri=True)
        try:
            assert con.execute("SELECT id, batch FROM dictionaries").fetchall() == [(1, 1)]
            assert con.execute("SELECT batch, dictionary, count(*) FROM contents GROUP BY 1, 2"
                               ).fetchall() == [(1, 1, 300), (2, 1, 20)]
        finally:
            con.close()
        rows = contents_by_id(index)
        assert sorted(r[4] for r in rows.values() if r[0] == 2) == sorted(map(normalize, new))
        found.append(rows)
        code, _, err = run_cli("--index", index, "index", "check")
        assert code == 0, err
    assert found[0] == found[1]


def test_no_block_waits_for_the_first_dictionary(tmp_path, monkeypatch):
    """With two workers (six blocks in flight, a seventh sent before the oldest is read),
    the six blocks sent while the first one trains the batch's dictionary go out before its
    result is read, asking for their texts uncompressed; the main process compresses them with that dictionary, and the index holds
    the same rows (texts, dictionary ids, compressed bytes) as one written a block at a time
    without a pool."""
    from concurrent.futures import Executor, Future
    from contextlib import contextmanager

    monkeypatch.setattr(ingest_batch, "BLOCK_LINES", 150)
    texts = [f"Record {i}. {P[i % len(P)]} {P[(i * 7 + 1) % len(P)]}" for i in range(1500)]
    pkg = make_package(tmp_path / "pkgs", "cpt-a", {"train": docs("a", texts)})
    events: list[tuple] = []

    class Recorded(Future):
        def __init__(self, block: int) -> None:
            super().__init__()
            self.block = block

        def result(self, timeout=None):
            events.append(("read", self.block))
            return super().result(timeout)

    class Recording(Executor):
        parallelism = 2

        def submit(self, fn, /, *args, **kwargs):
            job = args[0]
            block = job.block.first_line // 150
            events.append(("sent", block, job.compress))
            fut = Recorded(block)
            fut.set_result(fn(*args, **kwargs))
            return fut

    @contextmanager
    def recording_pool(executor, workers, initializer=None, initargs=(), preload=()):
        yield Recording()

    monkeypatch.setattr(ingest_run, "work_pool", recording_pool)
    monkeypatch.setattr(ingest_batch, "shared_blocks", lambda workers: None)  # blocks by value
    pooled = tmp_path / "pooled.sqlite"
    ingest_run.index_packages(pooled, NearDedupConfig(), [pkg], workers=2)
    monkeypatch.undo()
    monkeypatch.setattr(ingest_batch, "BLOCK_LINES", 150)
    assert events[:8] == [("sent", 0, True), *(("sent", b, False) for b in range(1, 7)),
                          ("read", 0)]
    assert [e for e in events if e[0] == "sent"][7:] == [("sent", b, True) for b in range(7, 10)]
    alone = tmp_path / "alone.sqlite"
    ingest_run.index_packages(alone, NearDedupConfig(), [pkg], workers=1)
    rows = []
    for index in (pooled, alone):
        con = sqlite3.connect(f"file:{index}?mode=ro", uri=True)
        try:
            rows.append((con.execute("SELECT id, content_id, text_z, dictionary FROM contents "
                                     "ORDER BY id").fetchall(),
                         con.execute("SELECT id, data FROM dictionaries").fetchall()))
        finally:
            con.close()
    assert rows[0] == rows[1]
    assert {d for _, _, _, d in rows[0][0]} == {1}
    assert sorted(row[4] for row in contents_by_id(pooled).values()) == \
        sorted(normalize(t) for t in texts)


def test_first_ingest_order_does_not_depend_on_input_order(tmp_path):
    scope = cpt_scope({"name": "qwen2-tok", "revision": "r3"}).key

    def cid(text: str) -> bytes:
        return content_id(scope, normalize(text))

    # a near pair whose copy in cpt-b (the later input) has the smaller content_id
    orig_b = next(p for p in P[40:60] if cid(reverse_every(p, 40)) < cid(p)
                  and 0.9 <= jaccard(p, reverse_every(p, 40)) < 1)
    near_a, near_b = drop_every(P[80], 40), reverse_every(orig_b, 40)
    far = reverse_every(P[66], 3)
    assert jaccard(P[80], near_a) >= 0.9 and jaccard(P[66], far) < 0.9
    # enough distinct text (>= 128 texts, >= 100 KB) that the batch trains a text dictionary
    filler = [P[100 + i % 80] + " " + P[200 + (i + i // 80 * 7) % 80] for i in range(160)]
    pkgs = tmp_path / "pkgs"
    a = make_package(pkgs, "cpt-a", {"train": docs("a", P[60:70])
                                     + docs("a", [near_a, orig_b], 10)
                                     + docs("a", filler[:80], 12),
                                     "validation": docs("va", [P[90]])})
    b = make_package(pkgs, "cpt-b", {"train": docs("b", P[60:63])
                                     + docs("b", [near_b, P[80], far], 3)
                                     + docs("b", P[70:75], 6) + docs("b", filler[80:], 11),
                                     "validation": docs("vb", [P[90]])})
    ab, ba = tmp_path / "ab.sqlite", tmp_path / "ba.sqlite"
    index_ok(ab, a, b)
    index_ok(ba, b, a)
    rows_ab, rows_ba = contents_by_id(ab), contents_by_id(ba)
    assert ({(cid, row[0]) for cid, row in rows_ab.items()}
            == {(cid, row[0]) for cid, row in rows_ba.items()})
    assert rows_ab == rows_ba
    reports = []
    for idx in (ab, ba):
        out = tmp_path / f"report-{idx.stem}"
        code, _, err = run_cli("--quiet", "--index", idx, "scan", "--inputs", a, b,
                               "--output", out, "--workers", 1)
        assert code == 0, err
        reports.append(out)
    for name in ("decisions.jsonl", "relations.jsonl", "origins.jsonl"):
        assert (reports[0] / name).read_bytes() == (reports[1] / name).read_bytes(), name
    decisions = {(d["package_id"], d["sample_id"]): d for d in map(
        json.loads, (reports[0] / "decisions.jsonl").read_text().splitlines())}
    assert {"exact_duplicate", "near_duplicate", "retained_split", "unique"} <= {
        d["reason"] for d in decisions.values()}
    # one batch: of a near pair, the content with the smaller content_id is first and kept,
    # whichever package came first on the command line
    for x, y in ((("cpt-a", "a11"), ("cpt-b", "b3")), (("cpt-a", "a10"), ("cpt-b", "b4"))):
        first, later = sorted((decisions[x], decisions[y]), key=lambda d: d["content_id"])
        assert first["decision"] == "keep"
        assert (later["decision"], later["reason"]) == ("exclude", "near_duplicate")
        assert later["kept"] == {"package_id": first["package_id"],
                                 "sample_id": first["sample_id"]}
    assert decisions["cpt-a", "a11"]["kept"] == {"package_id": "cpt-b", "sample_id": "b3"}


# --------------------------------------------------------------------------- refusals: path


@pytest.mark.parametrize("existing", [False, True], ids=["new", "existing-index"])
def test_refuses_a_path_named_pipeline_db(world, tmp_path, existing):
    index = tmp_path / "pipeline.db"
    if existing:
        shutil.copyfile(world.base, index)
    before = Unchanged(index)
    refused(index_args(index, world.v2), 1, f"index {index}: refusing pipeline.db")
    before.check()


@pytest.mark.parametrize("relative", ["cpt.sqlite", "indexes/cpt.sqlite", "data/cpt.sqlite"])
def test_refuses_an_index_inside_an_input_package(world, tmp_path, relative):
    pkg = shutil.copytree(world.v2, tmp_path / "cpt-v2")
    before = tree_bytes(pkg)
    refused(index_args(pkg / relative, world.v1, pkg), 1, "inside input package",
            "packages are immutable")
    assert tree_bytes(pkg) == before
    assert not (pkg / "indexes").exists()


@pytest.mark.parametrize("folder, kind", [("v1", "snapshot package"),
                                          ("report", "near-dedup report"),
                                          ("mixture", "mixture package")])
def test_refuses_an_index_inside_a_package_report_or_mixture(world, folder, kind):
    target = getattr(world, folder)
    before = tree_bytes(target)
    index = target / "nested" / "cpt.sqlite"
    refused(index_args(index, world.v2), 1, f"inside {kind} {target.resolve()}",
            "outside packages, reports and mixtures")
    assert tree_bytes(target) == before
    assert not (target / "nested").exists()


def _foreign_sqlite(path: Path, meta: bool) -> None:
    con = sqlite3.connect(path)
    if meta:  # a key/value table named like ours, written by another tool
        con.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        con.execute("INSERT INTO meta VALUES ('format', 'dagster-run-storage')")
    else:
        con.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, body TEXT)")
        con.execute("INSERT INTO runs (body) VALUES ('x')")
    con.commit()
    con.close()


@pytest.mark.parametrize("what, fragment", [
    ("text", "exists and is not a near-dedup index (not SQLite)"),
    ("empty", "exists and is not a near-dedup index (not SQLite)"),
    ("sqlite", "exists and is not a near-dedup index"),
    ("sqlite-meta", "not a near-dedup index"),
    ("directory", "not a regular file"),
])
def test_refuses_an_existing_file_that_is_not_an_index(world, tmp_path, what, fragment):
    index = tmp_path / "cpt.sqlite"
    if what == "text":
        index.write_text("release notes, not an index\n", encoding="utf-8")
    elif what == "empty":
        index.touch()
    elif what == "directory":
        index.mkdir()
    else:
        _foreign_sqlite(index, meta=what == "sqlite-meta")
    before_bytes = None if index.is_dir() else index.read_bytes()
    before_files = leftovers(index)
    refused(index_args(index, world.v2), 1, f"index {index}: ", fragment)
    assert (None if index.is_dir() else index.read_bytes()) == before_bytes
    assert leftovers(index) == before_files


# --------------------------------------------------------------------------- refusals: binding


@pytest.mark.parametrize("change", [{"threshold": 0.85}, {"shingle_size": 4},
                                    {"max_chars": 150_000}, {"extra_units": [{"tokens": ["mg"]}]}],
                         ids=["threshold", "shingle_size", "max_chars", "extra_units"])
def test_refuses_a_different_config(world, any_index, tmp_path, change):
    config = write_config(tmp_path / "other.json", **change)
    before = Unchanged(any_index)
    refused(index_args(any_index, world.v2, config=config), 1, f"index {label(any_index)}: "
            "bound to a different config", "use a new index path")
    before.check()


def test_the_same_config_spelled_out_is_accepted(world, index, tmp_path):
    config = write_config(tmp_path / "same.json", **NearDedupConfig().model_dump(mode="json"))
    assert "batch 2 added cpt-v2" in index_ok(index, world.v2, config=config)


@pytest.mark.parametrize("key, value, fragment", [
    ("algorithm_version", "nd-0", f"built with algorithm nd-0, this tool runs "
                                  f"{ALGORITHM_VERSION}; use a new index path"),
    ("schema_version", "0", f"schema version 0 is not {index_store.SCHEMA_VERSION}; use a new "
                            f"index path"),
    ("format", "other-tool-index", "not a near-dedup index"),
])
def test_refuses_an_index_of_another_algorithm_or_schema(world, index, key, value, fragment):
    con = sqlite3.connect(index)
    con.execute("UPDATE meta SET value = ? WHERE key = ?", (value, key))
    con.commit()
    con.close()
    before = Unchanged(index)
    refused(index_args(index, world.v2), 1, f"index {index}: ", fragment)
    before.check()


# --------------------------------------------------------------------------- refusals: packages


def test_refuses_a_changed_manifest_for_an_indexed_package_id(world, any_index, tmp_path):
    changed = make_package(tmp_path, "cpt-v1", {"train": docs("a", P[:24]),
                                                "validation": docs("va", P[24:26])},
                           created_at="2026-12-01T00:00:00Z")
    before = Unchanged(any_index)
    refused(index_args(any_index, world.v2, changed), 1, "package cpt-v1, manifest.json: package "
            "is already indexed with manifest sha256", "packages are immutable")
    before.check()


@pytest.mark.parametrize("existing", [False, True], ids=["new", "existing-index"])
def test_refuses_mixed_kinds_in_one_command(world, index, new_index, existing):
    target = index if existing else new_index
    before = Unchanged(target)
    refused(index_args(target, world.v2, world.sft), 1, "package sft-v1: kind sft differs "
            "from kind cpt of package cpt-v2", "all cpt or all sft")
    before.check()


def test_refuses_sft_packages_for_an_index_of_cpt(world, any_index):
    before = Unchanged(any_index)
    refused(index_args(any_index, world.sft), 1, f"index {label(any_index)}: holds cpt "
            "packages; sft packages need their own index")
    before.check()


def _v3(tmp_path: Path, ref_id: str = "a0") -> Path:
    return make_package(tmp_path, "cpt-v3", {"train": docs("c", P[70:72]) + [
        {"id": "c2", "ref": {"package_id": "cpt-v1", "id": ref_id}, "domain": "docs"}]},
        depends_on=["cpt-v1"])


def test_refuses_depends_on_outside_the_inputs_even_if_indexed(world, index, tmp_path):
    v3 = _v3(tmp_path)
    before = Unchanged(index)
    refused(index_args(index, v3), 1, "package cpt-v3, manifest.json: lineage.depends_on "
            "names package cpt-v1, which is not among the inputs")
    before.check()
    # given together, the indexed cpt-v1 is skipped and the ref resolves through the index
    out = index_ok(index, world.v1, v3)
    assert out.startswith(f"index {index}: batch 2 added cpt-v3: 3 records, 2 new texts, "
                          f"1 repeat of texts seen before")
    con = sqlite3.connect(f"file:{index}?mode=ro", uri=True)
    rows = dict(con.execute(
        "SELECT p.package_id || '/' || s.sample_id, s.content || ':' || hex(s.text_sha256) "
        "FROM sources s JOIN packages p ON p.id = s.package "
        "WHERE (p.package_id, s.sample_id) IN (VALUES ('cpt-v1', 'a0'), ('cpt-v3', 'c2'))"))
    con.close()
    assert rows["cpt-v3/c2"] == rows["cpt-v1/a0"]


@pytest.mark.parametrize("existing", [False, True], ids=["new", "existing-index"])
def test_refuses_a_ref_to_a_missing_sample(world, index, new_index, tmp_path, existing):
    target = index if existing else new_index
    before = Unchanged(target)
    refused(index_args(target, world.v1, _v3(tmp_path, ref_id="nope")), 1,
            "package cpt-v3, data/train/part-00000.jsonl:3: ref to sample 'nope' of package "
            "cpt-v1, which has no such sample")
    before.check()


@pytest.mark.parametrize("existing", [False, True], ids=["new", "existing-index"])
def test_a_bad_line_in_the_last_package_rolls_back_the_whole_batch(
        world, base_index, new_index_location, tmp_path, monkeypatch, existing):
    if isinstance(base_index, Path):  # SQLite: a private copy, or a path with no file yet
        target: Path | str = tmp_path / "idx" / "cpt.sqlite"
        target.parent.mkdir()
        if existing:
            shutil.copyfile(base_index, target)
    else:
        target = new_index_location(tmp_path / "idx")
        if existing:
            index_ok(target, world.v1)
    # blocks of 4 lines: earlier packages are written before the bad line
    monkeypatch.setattr(ingest_batch, "BLOCK_LINES", 4)
    writes = []
    real_write = ingest_batch.BatchWriter._write_contents

    def counting_write(self, rows, *rest):
        writes.append(len(rows))
        return real_write(self, rows, *rest)

    monkeypatch.setattr(ingest_batch.BatchWriter, "_write_contents", counting_write)
    v3 = make_package(tmp_path, "cpt-v3", {"train": docs("c", P[100:110])})
    records = docs("d", P[110:118])
    records[6] = b'{"id": "d6", "text": "an unterminated'
    v4 = make_package(tmp_path, "cpt-v4", {"train": records}, shard_records=4)
    before = Unchanged(target)
    refused(index_args(target, world.v2, v3, v4), 1,
            "package cpt-v4, data/train/part-00001.jsonl:3: line is not valid JSON")
    assert sum(writes) >= 20, "contents of cpt-v2 and cpt-v3 were written before the bad line"
    before.check()
    out = index_ok(target, world.v2, v3)  # the same batch without the bad package goes through
    assert f"batch {1 + existing} added cpt-v2, cpt-v3: 34 records" in out


def _line_case(replacement, **kwargs):
    def build(tmp_path: Path, world: World) -> list[Path]:
        records = docs("x", P[120:123])
        records[1] = replacement
        return [make_package(tmp_path, "cpt-bad", {"train": records}, **kwargs)]
    return build


def _manifest_case(change):
    def build(tmp_path: Path, world: World) -> list[Path]:
        pkg = make_package(tmp_path, "cpt-bad", {"train": docs("x", P[120:123])})
        change(pkg)
        return [pkg]
    return build


def _edit(change):
    return _manifest_case(lambda pkg: update_manifest(pkg, change))


def _replace_bytes(pkg: Path, old: bytes, new: bytes) -> None:
    shard = pkg / "data/train/part-00000.jsonl"
    shard.write_bytes(shard.read_bytes().replace(old, new, 1))


def _unlisted(pkg: Path) -> None:
    (pkg / "data/train/part-00001.jsonl").write_bytes(b'{"id": "z", "text": "z"}\n')


def _empty(pkg: Path) -> None:
    shutil.rmtree(pkg / "data")
    update_manifest(pkg, lambda m: m.update(files=[]))


def _twice(tmp_path: Path, world: World) -> list[Path]:
    return [make_package(tmp_path, "cpt-bad", {"train": docs("x", P[120:123])}, dirname=name)
            for name in ("one", "two")]


def _cycle(tmp_path: Path, world: World) -> list[Path]:
    return [make_package(tmp_path, "cpt-bad", {"train": docs("x", P[120:123])},
                         depends_on=["cpt-bad2"]),
            make_package(tmp_path, "cpt-bad2", {"train": docs("y", P[123:125])},
                         depends_on=["cpt-bad"])]


def _ref_with_content(tmp_path: Path, world: World) -> list[Path]:
    return [world.v1] + _line_case({"id": "x1", "ref": {"package_id": "cpt-v1", "id": "a0"},
                                    "text": "carried"}, depends_on=["cpt-v1"])(tmp_path, world)


LINE2 = "package cpt-bad, data/train/part-00000.jsonl:2: "
VALIDATION_CASES = {
    "not-json": (_line_case(b'{"id": "x1", "text": '), LINE2 + "line is not valid JSON"),
    "not-object": (_line_case(b'["x1", "text"]'), LINE2 + "line is not a JSON object"),
    "not-utf8": (_line_case(b'{"id": "x1", "text": "caf\xe9"}'), LINE2 + "line is not valid UTF-8 (byte 26)"),
    "empty-line": (_line_case(b""), LINE2 + "empty line"),
    "missing-id": (_line_case({"text": P[121]}), LINE2 + "missing field 'id'"),
    "missing-text": (_line_case({"id": "x1"}), LINE2 + "missing field 'text'"),
    "text-type": (_line_case({"id": "x1", "text": 7}),
                  LINE2 + "field 'text' must be a string, found int"),
    "source-type": (_line_case({"id": "x1", "text": P[121], "source": "web"}),
                    LINE2 + "field 'source' must be an object"),
    "duplicate-id": (_line_case({"id": "x0", "text": P[121]}), LINE2 + "duplicate id 'x0'"),
    "ref-outside-depends-on": (_line_case({"id": "x1", "ref": {"package_id": "cpt-v1",
                                                                "id": "a0"}}),
                               LINE2 + "ref names package 'cpt-v1', which is not in this "
                                       "package's lineage.depends_on"),
    "ref-with-content": (_ref_with_content,
                         LINE2 + "a ref record must not carry content field 'text'"),
    "manifest-missing": (_manifest_case(lambda p: (p / "manifest.json").unlink()),
                         "cpt-bad: manifest.json is missing"),
    "manifest-not-json": (_manifest_case(lambda p: (p / "manifest.json").write_text("{")),
                          "cpt-bad, manifest.json: not valid JSON"),
    "format": (_edit(lambda m: m.update(format="parquet-dump")),
               "package cpt-bad, manifest.json: format must be 'training-snapshot'"),
    "format-version": (_edit(lambda m: m.update(format_version=1)),
                       "package cpt-bad, manifest.json: format_version must be 2, found 1"),
    "kind": (_edit(lambda m: m.update(kind="rlhf")),
             "package cpt-bad, manifest.json: kind must be one of cpt, sft, found 'rlhf'"),
    "tokenizer": (_edit(lambda m: m.pop("tokenizer")),
                  "package cpt-bad, manifest.json: tokenizer is required for cpt"),
    "package-id": (_edit(lambda m: m.update(package_id="cpt bad")),
                   "cpt-bad, manifest.json: package_id must match [A-Za-z0-9._-]+"),
    "file-missing": (_manifest_case(lambda p: (p / "data/train/part-00000.jsonl").unlink()),
                     "package cpt-bad, data/train/part-00000.jsonl: listed in manifest.json "
                     "but missing"),
    "file-unlisted": (_manifest_case(_unlisted), "package cpt-bad, data/train/part-00001.jsonl: "
                      "file under data/ is not listed in manifest.json"),
    "size-changed": (_manifest_case(lambda p: _replace_bytes(p, b'"x1"', b'"x1b"')),
                     "package cpt-bad, data/train/part-00000.jsonl: size is"),
    "content-changed": (_manifest_case(lambda p: _replace_bytes(p, b'"x1"', b'"x9"')),
                        "package cpt-bad, data/train/part-00000.jsonl: sha256 does not match "
                        "manifest.json (file changed)"),
    "record-count": (_edit(lambda m: m["files"][0].update(records=4)),
                     "package cpt-bad, data/train/part-00000.jsonl: has 3 records, "
                     "manifest.json says 4"),
    "empty-package": (_manifest_case(_empty), "package cpt-bad, manifest.json: the package is "
                      "empty"),
    "depends-on-itself": (_edit(lambda m: m["lineage"].update(depends_on=["cpt-bad"])),
                          "package cpt-bad, manifest.json: lineage.depends_on names the "
                          "package itself"),
    "dependency-cycle": (_cycle, "lineage.depends_on forms a cycle"),
    "id-given-twice": (_twice, "package cpt-bad: package id given twice"),
}


@pytest.mark.parametrize("case", list(VALIDATION_CASES))
def test_every_validation_rule_refuses_the_batch(world, index, tmp_path, case):
    build, fragment = VALIDATION_CASES[case]
    inputs = [world.v2, *build(tmp_path / "bad", world)]
    before = Unchanged(index)
    err = refused(index_args(index, *inputs), 1, fragment)
    assert err.startswith("near-dedup: error: package ")
    before.check()


def test_usage_errors_are_one_line(world, tmp_path):
    refused(["index", "--inputs", world.v1], 1, "usage: index needs --index PATH")
    refused(["--index", tmp_path / "i.sqlite", "index"], 1, "usage: ")
    refused(["--index", tmp_path / "i.sqlite", "index", "--inputs", world.v1, "--workers", 0],
            1, "usage: ")
    refused(["--index", tmp_path / "i.sqlite", "index", "--inputs", tmp_path / "nowhere"], 1,
            "nowhere: no such package directory")
    assert leftovers(tmp_path / "i.sqlite") == []


# --------------------------------------------------------------------------- limits


@pytest.mark.parametrize("existing", [False, True], ids=["new", "existing-index"])
def test_a_pool_over_max_pool_records_exits_2(world, tmp_path, existing):
    config = write_config(tmp_path / "small-pool.json", max_pool_records=30)
    index = tmp_path / "pool" / "cpt.sqlite"
    index.parent.mkdir()
    if existing:
        index_ok(index, world.v1, config=config)  # 26 records fit
    v3 = make_package(tmp_path, "cpt-v3", {"train": docs("c", P[100:110])})
    before = Unchanged(index)
    refused(index_args(index, world.v2, v3, config=config), 2,
            "input pool has 34 records, over max_pool_records 30")
    before.check()


@pytest.mark.parametrize("existing", [False, True], ids=["new", "existing-index"])
def test_a_sample_over_max_chars_exits_2(world, tmp_path, existing):
    config = write_config(tmp_path / "short.json", max_chars=1200)
    fitting = [p for p in P if len(p) < 1200]
    index = tmp_path / "chars" / "cpt.sqlite"
    index.parent.mkdir()
    if existing:
        small = make_package(tmp_path, "cpt-small", {"train": docs("s", fitting[:5])})
        index_ok(index, small, config=config)
    long_text = " ".join(fitting[140:145])
    assert len(long_text) > 1200
    other = make_package(tmp_path, "cpt-other", {"train": docs("o", fitting[120:130])})
    pkg = make_package(tmp_path, "cpt-long", {"train": docs("l", fitting[130:132] + [long_text])})
    before = Unchanged(index)
    refused(index_args(index, other, pkg, config=config), 2,
            f"package cpt-long, data/train/part-00000.jsonl:3: sample l2 has "
            f"{len(long_text):,} characters, over max_chars 1,200")
    before.check()


# --------------------------------------------------------------------------- damage


#: Rows deleted or changed behind the tool's back, each breaking an invariant that a scan or
#: an append relies on, and the words of the one line that `index check`, `scan` and `index`
#: all print for it.
DAMAGES = {
    "source": ("DELETE FROM sources WHERE id = 5",
               "the index holds 25 sources, its packages 26 records"),
    "package": ("DELETE FROM packages WHERE package_id = 'cpt-v1'",
                "no packages row for cpt-v1, which batch 1 added"),
    "scope": ("DELETE FROM scopes", "damaged (a content names a missing scope)"),
    "bands_merged_through": ("DELETE FROM meta WHERE key = 'bands_merged_through'",
                             "meta lacks bands_merged_through"),
    "kind": ("DELETE FROM meta WHERE key = 'kind'", "meta lacks kind"),
    "signature": ("UPDATE contents SET signature = NULL WHERE id = (SELECT MIN(content) "
                  "FROM bands)",
                  "damaged (a content's signature does not match its length (min_chars))"),
    "content": ("DELETE FROM contents WHERE id = 3", "damaged (1 content rows are missing)"),
}


def damage(index: Path, sql: str) -> None:
    con = sqlite3.connect(index)
    con.execute(sql)
    con.commit()
    con.close()


@pytest.mark.parametrize("what", list(DAMAGES))
def test_check_scan_and_append_stop_at_the_same_broken_invariant(world, index, tmp_path, what):
    """`index check` names each damage in one line (exit 1); `scan` publishes nothing and
    `index` appends nothing, each stopping with that same line; nothing changes on disk, and
    no -wal/-shm file is left."""
    sql, fragment = DAMAGES[what]
    damage(index, sql)
    before = Unchanged(index)
    files = leftovers(index)
    line = refused(["--quiet", "--index", index, "index", "check"], 1, f"index {index}: ",
                   fragment)
    assert refused(["--quiet", "--index", index, "scan", "--inputs", world.v1, "--output",
                    tmp_path / "rep"], 1) == line
    assert not (tmp_path / "rep").exists()
    assert refused(index_args(index, world.v1, world.v2), 1) == line
    before.check()
    assert leftovers(index) == files == [index.name]


def test_random_bytes_in_the_file_stop_check_scan_and_append(world, index, tmp_path):
    """16 KiB of random bytes at 35 % of the file, where neither the scan nor the append
    reads: SQLite's page check, which runs beside them, stops both before anything is
    published or committed."""
    size = index.stat().st_size
    with open(index, "r+b") as fh:
        fh.seek(int(size * 0.35))
        fh.write(np.random.default_rng(3).integers(0, 256, 16384, dtype=np.uint8).tobytes())
    before = Unchanged.__new__(Unchanged)
    before.index, before.digest, before.files = index, digest(index), leftovers(index)
    damaged = f"index {index}: damaged ("
    refused(["--quiet", "--index", index, "index", "check"], 1, damaged)
    refused(["--quiet", "--index", index, "scan", "--inputs", world.v1, "--output",
             tmp_path / "rep"], 1, damaged)
    assert not (tmp_path / "rep").exists()
    refused(index_args(index, world.v1, world.v2), 1, damaged)
    assert digest(index) == before.digest
    assert leftovers(index) == before.files == [index.name]


def _long_in_the_thread(ran: list[str]):
    """A check that runs a long statement in the check's thread (until interrupted) and a short
    one in the caller's, recording where it ran and at which priority."""
    def check(con: sqlite3.Connection) -> None:
        if threading.current_thread() is threading.main_thread():
            ran.append("caller")
            con.execute("SELECT 1").fetchall()
            return
        ran.append(f"thread at nice {os.getpriority(os.PRIO_PROCESS, threading.get_native_id())}")
        con.execute("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                    "WHERE i < 10000000000) SELECT COUNT(*) FROM n").fetchall()
    return check


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's nice value")
def test_a_starved_page_check_finishes_in_the_callers_thread(monkeypatch):
    """The page check beside a scan runs at the lowest priority; when the scan waits for it and
    it has not finished, and the thread may not be put back at the scan's priority (an
    unprivileged user), it is stopped and what is left runs in the caller's thread: no
    waiting behind a busy box's other processes."""
    from near_dedup_core.index_store import invariants
    from near_dedup_core.index_store.invariants import BackgroundCheck

    monkeypatch.setattr(invariants, "_lift", lambda thread: False)
    ran: list[str] = []
    quick: list[str] = []
    con = sqlite3.connect(":memory:", check_same_thread=False)
    pages = BackgroundCheck(con, [lambda c: quick.append("done"), _long_in_the_thread(ran)],
                            con.interrupt, idle=True)
    deadline = time.monotonic() + 30
    while not ran:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    started = time.monotonic()
    pages.result()
    assert time.monotonic() - started < 10
    assert ran == ["thread at nice 19", "caller"] and quick == ["done"]  # the first ran once


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's nice value")
def test_a_starved_page_check_is_lifted_to_the_callers_priority_and_not_run_again():
    """Where the system lets it (a privileged process: a container's root, CI), the waiting
    caller puts the check's thread back at its own priority and waits: the check's work is
    not thrown away and paid again in the caller's thread. Where it does not, the check is
    stopped and run in the caller's thread (the test above)."""
    from near_dedup_core.index_store import invariants
    from near_dedup_core.index_store.invariants import BackgroundCheck

    ran: list[str] = []

    def check(con: sqlite3.Connection) -> None:
        where = "caller" if threading.current_thread() is threading.main_thread() else "thread"
        nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        ran.append(f"{where} at nice {nice}")
        con.execute("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                    "WHERE i < 20000000) SELECT COUNT(*) FROM n").fetchall()
        ran.append(f"{where} done at nice "
                   f"{os.getpriority(os.PRIO_PROCESS, threading.get_native_id())}")

    con = sqlite3.connect(":memory:", check_same_thread=False)
    pages = BackgroundCheck(con, [check], con.interrupt, idle=True)
    deadline = time.monotonic() + 30
    while not ran:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    probe = threading.Thread(target=time.sleep, args=(0.5,))
    probe.start()
    os.setpriority(os.PRIO_PROCESS, probe.native_id, 19)
    may_lift = invariants._lift(probe)
    probe.join()
    pages.result()
    if may_lift:
        assert ran == ["thread at nice 19", f"thread done at nice {own}"]
    else:
        assert ran[0] == "thread at nice 19" and ran[-2:] == [f"caller at nice {own}",
                                                            f"caller done at nice {own}"]


def test_damage_the_idle_check_found_is_reported_as_found():
    from near_dedup_core.errors import NearDedupError
    from near_dedup_core.index_store.invariants import BackgroundCheck

    def damaged(_con):
        raise NearDedupError("index x: damaged (here)")

    con = sqlite3.connect(":memory:", check_same_thread=False)
    pages = BackgroundCheck(con, [damaged, _long_in_the_thread([])], con.interrupt, idle=True)
    with pytest.raises(NearDedupError, match="damaged"):
        pages.result()


@pytest.mark.parametrize("how", ["truncated", "overwritten"])
def test_refusals_of_a_broken_file_change_nothing_and_leave_no_side_files(world, index, tmp_path,
                                                                          how):
    """A truncated file, or one whose header page is overwritten: `index check`, `scan` and
    `index` each refuse in one line naming the damage, and leave the folder as it was (no
    -wal/-shm file: the connections that met the damage are closed)."""
    size = index.stat().st_size
    if how == "truncated":
        os.truncate(index, size // 2)
    else:
        with open(index, "r+b") as fh:
            fh.seek(100)
            fh.write(np.random.default_rng(5).integers(0, 256, 16284, dtype=np.uint8).tobytes())
    before = digest(index)
    damaged = f"index {index}: damaged ("
    refused(["--quiet", "--index", index, "index", "check"], 1, damaged)
    assert leftovers(index) == [index.name]
    refused(["--quiet", "--index", index, "scan", "--inputs", world.v1, "--output",
             tmp_path / "rep"], 1, damaged)
    assert leftovers(index) == [index.name] and not (tmp_path / "rep").exists()
    refused(index_args(index, world.v2), 1, damaged)
    assert leftovers(index) == [index.name] and digest(index) == before


def test_a_check_and_a_scan_refused_for_its_output_leave_no_side_files(world, index, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n", encoding="utf-8")
    before = digest(index)
    refused(["--quiet", "--index", index, "scan", "--inputs", world.v1, "--output",
             blocker / "rep"], 1, str(blocker))
    assert leftovers(index) == [index.name]
    code, out, err = run_cli("--quiet", "--index", index, "index", "check")
    assert (code, err) == (0, "") and out.startswith(f"index {index}: OK (1 batch"), err
    assert leftovers(index) == [index.name] and digest(index) == before


# --------------------------------------------------------------------------- concurrency


_HOLD_LOCK = """
import sys
from pathlib import Path
from near_dedup_core.index_store.sqlite.write import writer_lock
with writer_lock(Path(sys.argv[1])):
    print("locked", flush=True)
    sys.stdin.read()
"""


def _hold_lock(index: Path) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(index)],
                              env={**os.environ, "PYTHONPATH": str(REPO)}, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert holder.stdout.readline().strip() == "locked"
    return holder


def _release(holder: subprocess.Popen) -> None:
    holder.stdin.close()
    assert holder.wait(timeout=30) == 0
    holder.stdout.close()


def test_a_second_writer_gives_up_when_the_index_is_busy(world, index, monkeypatch):
    holder = _hold_lock(index)
    try:
        monkeypatch.setenv("NEAR_DEDUP_BUSY_TIMEOUT", "1")
        before = Unchanged(index)
        start = time.monotonic()
        refused(index_args(index, world.v2), 1, f"index {index}: busy, another near-dedup "
                "index run holds it (waited 1s)")
        assert time.monotonic() - start >= 1.0  # it waited its timeout before giving up
        before.check()
    finally:
        _release(holder)
    assert "batch 2 added cpt-v2" in index_ok(index, world.v2)


def test_a_waiting_writer_proceeds_when_the_lock_is_released(world, index, monkeypatch):
    holder = _hold_lock(index)
    monkeypatch.setenv("NEAR_DEDUP_BUSY_TIMEOUT", "30")
    timer = threading.Timer(1.0, holder.stdin.close)
    timer.start()
    try:
        out = index_ok(index, world.v2)
    finally:
        timer.join()
        holder.wait(timeout=30)
        holder.stdout.close()
    assert "batch 2 added cpt-v2" in out
    assert own_files(index) == [index.name]


# --------------------------------------------------------------------------- SIGKILL


KILL_RECORDS = 10000


@pytest.fixture(scope="module")
def big_package(tmp_path_factory) -> Path:
    """10,000 records of six stdlib paragraphs each (~3 KB), ten shards: the kills below pause
    the batch half-way (`_PAUSE_AFTER_WRITES`), whatever the speed of the box."""
    rng = np.random.default_rng(2026)
    texts = [" ".join(P[j] for j in rng.choice(len(P), size=6, replace=False))
             for _ in range(KILL_RECORDS)]
    return make_package(tmp_path_factory.mktemp("big"), "cpt-big", {"train": docs("g", texts)},
                        shard_records=1000)


_PAUSE_AFTER_WRITES = """
import os, sys, time
from near_dedup_core import cli
from near_dedup_core.ingest import batch

write_contents = batch.BatchWriter._write_contents


def write_then_pause(self, rows, *rest):
    write_contents(self, rows, *rest)
    if self.new_contents >= int(os.environ["PAUSE_AFTER_CONTENTS"]):
        print(f"paused after writing {self.new_contents} contents", file=sys.stderr, flush=True)
        time.sleep(600)


batch.BatchWriter._write_contents = write_then_pause
sys.exit(cli.main(sys.argv[1:]))
"""


def _kill_mid_batch(index: Path, package: Path, marker: bytes,
                    pause_after_contents: int) -> str:
    """Run `index` in its own process group, stopped inside its open transaction right after
    ``pause_after_contents`` content rows were written, and SIGKILL the group once ``marker``
    shows on its stderr; returns that stderr."""
    argv = ["--index", str(index), "index", "--inputs", str(package), "--workers", "2"]
    env = {**os.environ, "PYTHONPATH": str(REPO),
           "PAUSE_AFTER_CONTENTS": str(pause_after_contents)}
    command = [sys.executable, "-c", _PAUSE_AFTER_WRITES, *argv]
    proc = subprocess.Popen(command, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen = b""
    try:
        deadline = time.monotonic() + 120
        while marker not in seen:
            remaining = deadline - time.monotonic()
            assert remaining > 0, seen
            ready, _, _ = select.select([proc.stderr], [], [], remaining)
            if ready:
                chunk = os.read(proc.stderr.fileno(), 4096)
                assert chunk, (proc.wait(), seen)
                seen += chunk
        assert proc.poll() is None, "the batch ended before it could be killed"
        os.killpg(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        proc.stderr.close()
    text = seen.decode()
    assert "(100%)" not in text, text
    return text


@pytest.mark.slow
def test_sigkill_during_the_first_batch_leaves_no_index(world, big_package, tmp_path):
    index = tmp_path / "cpt.sqlite"
    said = _kill_mid_batch(index, big_package, b"paused after writing ",
                           pause_after_contents=KILL_RECORDS // 2)
    written = int(said.split("paused after writing ")[1].split()[0])
    assert KILL_RECORDS // 2 <= written < KILL_RECORDS  # killed with the staged rows written
    assert not index.exists()
    out = index_ok(index, world.v1)  # a leftover temporary sibling does not get in the way
    assert out.startswith(f"index {index}: batch 1 added cpt-v1: 26 records")
    assert index_state(index)["integrity"] == "ok"


@pytest.mark.slow
def test_sigkill_during_a_later_batch_leaves_the_index_as_before(world, big_package, index):
    before_digest, before_state = digest(index), index_state(index)
    half = KILL_RECORDS // 2
    said = _kill_mid_batch(index, big_package, b"paused after writing ",
                           pause_after_contents=half)
    written = int(said.split("paused after writing ")[1].split()[0])
    assert half <= written < KILL_RECORDS  # killed with rows of the batch written, not committed
    assert index_state(index) == before_state
    assert digest(index) == before_digest
    out = index_ok(index, big_package, workers=2)
    assert out.startswith(f"index {index}: batch 2 added cpt-big: {KILL_RECORDS:,} records, "
                          f"{KILL_RECORDS:,} new texts")
    state = index_state(index)
    assert state["integrity"] == "ok"
    assert [p[0] for p in state["packages"]] == ["cpt-big", "cpt-v1"]
    assert state["counts"]["sources"] == before_state["counts"]["sources"] + KILL_RECORDS
