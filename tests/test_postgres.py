"""The PostgreSQL index backend against a real server, the session's (pg_server.py, conftest.py).

The same packages indexed into SQLite and into PostgreSQL give the same index rows; every bad
state is one line and exit 1 with the database untouched; a SIGKILL'd append leaves the
database as it was; two concurrent appends both land, one after the other.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from helpers import (
    REPO,
    SAMPLES,
    drop_every,
    make_package,
    refused,
    reverse_every,
    run_cli,
    scan_with_an_append_meanwhile,
    sigkill_in_the_fold,
    stdlib_paragraphs,
    tree_bytes,
)
from pg_server import PostgresServer, require_bindir
from sqlalchemy import create_engine, select, text
from sqlalchemy.pool import NullPool

from near_dedup_core import index_store
from near_dedup_core.index_store import TextDecoder, schema
from near_dedup_core.index_store import postgres as index_postgres

# Each test starts from a fresh database of the session's PostgreSQL server.
pytestmark = pytest.mark.slow

require_bindir()
psycopg = pytest.importorskip("psycopg", reason="pip install 'near-dedup[postgres]'")

CPT = SAMPLES / "cpt"
V1 = CPT / "2026-11-25" / "cpt-v1"
V2 = CPT / "2026-11-26" / "cpt-v2"
V3 = CPT / "2026-11-27" / "cpt-v3"


@pytest.fixture(scope="module")
def server(postgres_server) -> PostgresServer:
    """The session's server (conftest.py); each test makes its own database on it."""
    return postgres_server


@pytest.fixture
def url(server) -> str:
    return server.create_database()


def _engine(index: str | Path):
    if str(index).startswith("postgresql://"):
        return create_engine("postgresql+psycopg://" + str(index).split("://", 1)[1],
                             poolclass=NullPool)
    return create_engine(f"sqlite:///{index}", poolclass=NullPool)


def index_rows(index: str | Path) -> dict:
    """Every row of the index that reports depend on, with backend-assigned ids (sources,
    dictionaries, scopes) replaced by what they stand for and texts decompressed."""
    t = schema
    with _engine(index).connect() as conn:
        meta = {k: v for k, v in conn.execute(select(t.meta.c.key, t.meta.c.value))
                if k != "created_at"}
        packages = {rowid: (pid, sha, batch, records) for rowid, pid, sha, batch, records in
                    conn.execute(select(t.packages.c.id, t.packages.c.package_id,
                                        t.packages.c.manifest_sha256, t.packages.c.batch,
                                        t.packages.c.records))}
        scopes = dict(conn.execute(select(t.scopes.c.id, t.scopes.c.scope_key)).all())
        raw = conn.connection.dbapi_connection
        reader = TextDecoder(index_postgres.QmarkConnection(raw)
                            if str(index).startswith("postgresql://") else raw)
        contents = sorted(
            (rowid, bytes(cid), scopes[scope], batch, chars, shingles,
             bytes(sig) if sig is not None else None, reader.text(bytes(z), dictionary))
            for rowid, cid, scope, batch, chars, shingles, sig, z, dictionary in conn.execute(
                select(t.contents.c.id, t.contents.c.content_id, t.contents.c.scope,
                       t.contents.c.batch, t.contents.c.norm_chars, t.contents.c.shingles,
                       t.contents.c.signature, t.contents.c.text_z, t.contents.c.dictionary)))
        bands = sorted((table.name, *r) for table in (t.bands, t.bands_recent)
                       for r in conn.execute(select(table.c.key, table.c.content)))
        s = t.sources.c
        sources = sorted(
            (packages[pkg][0], sid, content, split, file, line, pos, bytes(sha), dom, src)
            for content, pkg, sid, split, file, line, pos, sha, dom, src in conn.execute(
                select(s.content, s.package, s.sample_id, s.split, s.file, s.line, s.position,
                       s.text_sha256, s.domain, s.source)))
        batches = [tuple(r) for r in conn.execute(
            select(t.batches.c.seq, t.batches.c.packages).order_by(t.batches.c.seq))]
    return {"meta": meta, "packages": sorted(packages.values()), "contents": contents,
            "bands": bands, "sources": sources, "batches": batches}


def ok(index: str | Path, *inputs: Path, workers: int = 1) -> str:
    code, out, err = run_cli("--quiet", "--index", index, "index", "--inputs", *inputs,
                             "--workers", workers)
    assert (code, err) == (0, ""), err
    return out


def table_names(url: str) -> list[str]:
    with _engine(url).connect() as conn:
        return sorted(conn.execute(text(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")).scalars())


def wait_for_sessions_to_end(url: str, timeout: float = 60) -> None:
    """Wait until the database has no session but the asking one: the server's backend of a
    killed client ends (rolling its transaction back, releasing its locks) once it notices the
    closed connection."""
    deadline = time.monotonic() + timeout
    with _engine(url).connect() as conn:
        while conn.execute(text(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()")).scalar():
            assert time.monotonic() < deadline, "the killed client's session never ended"
            time.sleep(0.05)


# --------------------------------------------------------------------------- same rows


def test_the_bundled_days_give_the_same_index_rows_as_sqlite(url, tmp_path):
    lite = tmp_path / "cpt.sqlite"
    for day in (V1, V2, V3):
        assert ok(url, day).startswith(f"index {index_postgres.label(url)}: batch ")
        ok(lite, day)
    assert index_rows(url) == index_rows(lite)
    assert "nothing to do" in ok(url, V3)


def test_a_larger_real_text_batch_with_two_workers_gives_the_same_rows(url, tmp_path):
    texts = list(stdlib_paragraphs()[:900])
    pkg = make_package(tmp_path, "cpt-real", {"train": [
        {"id": f"d{i}", "text": t, "domain": "docs"} for i, t in enumerate(texts + texts[:50])]})
    lite = tmp_path / "real.sqlite"
    ok(url, pkg, workers=2)
    ok(lite, pkg, workers=2)
    assert index_rows(url) == index_rows(lite)


def test_band_rows_in_bands_recent_and_their_fold_match_sqlite(url, tmp_path):
    """A small day's band rows go to ``bands_recent``, a later batch folds them into
    ``bands``: the same rows, in the same tables, and the same reports as on SQLite; an index
    of schema 2 is upgraded by its next batch as on SQLite."""
    paras = stdlib_paragraphs()
    days = [make_package(tmp_path, name, {"train": [{"id": f"{name}-{i}", "text": t}
                                                    for i, t in enumerate(texts)]})
            for name, texts in (("day1", paras[:160]), ("day2", paras[160:168]),
                                ("day3", paras[168:184]))]
    pool = make_package(tmp_path, "pool", {"train": [
        {"id": f"p{i}", "text": reverse_every(t, 40)}
        for i, t in enumerate((*paras[:3], *paras[160:164], *paras[190:193]))]})
    lite = tmp_path / "layout.sqlite"
    for index in (url, lite):
        ok(index, days[0])
    with _engine(url).begin() as conn:  # as the tool before bands_recent left it
        conn.execute(text("DROP TABLE bands_recent"))
        conn.execute(text("UPDATE meta SET value = '2' WHERE key = 'schema_version'"))
        conn.execute(text("DELETE FROM meta WHERE key = 'bands_merged_through'"))
    for index in (url, lite):
        ok(index, days[1])
        ok(index, pool)
    rows = index_rows(url)
    assert rows == index_rows(lite)
    assert {table for table, *_ in rows["bands"]} == set(index_store.BAND_TABLES)
    assert scan_ok(url, tmp_path / "pg", pool) == scan_ok(lite, tmp_path / "lite", pool)
    assert "lookup keys of earlier batches merged" in ok(url, days[2])
    ok(lite, days[2])
    rows = index_rows(url)
    assert rows == index_rows(lite)
    assert {table for table, *_ in rows["bands"]} == {"bands"}
    code, out, err = run_cli("--index", url, "index", "check")
    assert (code, err) == (0, "") and "OK" in out, err


def test_the_history_join_leaves_bands_recent_out_when_it_holds_only_the_pool(
        server, tmp_path, monkeypatch):
    """As on SQLite: when the pool is the index's newest batch, ``bands_recent`` holds only the
    pool's own band rows and the history join probes ``bands`` alone; a day indexed after the
    pool puts rows there that the join must read. Reports as SQLite's either way."""
    paras = stdlib_paragraphs()
    day1, day2 = (make_package(tmp_path, name, {"train": [
        {"id": f"{name}-{i}", "text": t} for i, t in enumerate(texts)]})
        for name, texts in (("day1", paras[:160]), ("day2", paras[160:168])))
    pool = make_package(tmp_path, "pool", {"train": [
        {"id": f"p{i}", "text": reverse_every(t, 40)}
        for i, t in enumerate((*paras[:3], *paras[160:164], *paras[190:193]))]})
    joins: list[str] = []
    probe = index_postgres._probe_band_tables

    def traced(raw, keys, pool_contents, sql):
        joins.append(sql)
        return probe(raw, keys, pool_contents, sql)

    monkeypatch.setattr(index_postgres, "_probe_band_tables", traced)
    for days, recent in (((day1,), False), ((day1, day2), True)):
        url, lite = server.create_database(), tmp_path / f"{len(days)}.sqlite"
        for index in (url, lite):
            for day in days:
                ok(index, day)
        for index in (url, lite):
            ok(index, pool)
        joins.clear()
        reports = scan_ok(url, tmp_path / f"pg{len(days)}", pool)
        assert joins and all(("bands_recent" in sql) == recent for sql in joins), joins
        assert reports == scan_ok(lite, tmp_path / f"lite{len(days)}", pool)
        matched = {m["sample_id"] for line in reports["relations.jsonl"].splitlines()
                   for m in orjson.loads(line)["match_sources"]}
        assert matched == {"day1-0", "day1-1", "day1-2",
                           *(["day2-0", "day2-1", "day2-2", "day2-3"] if recent else [])}


def test_a_batch_too_small_to_train_a_dictionary_uses_the_newest_as_on_sqlite(url, tmp_path):
    """A cumulative snapshot's 20 new texts, too few to train on, are compressed with the
    first batch's dictionary on both backends: the same rows and the same compressed bytes."""
    paras = stdlib_paragraphs()
    first = [f"Record {i}. {paras[i % len(paras)]} {paras[(i * 7 + 1) % len(paras)]}"
             for i in range(300)]
    new = [f"Note {i}. {paras[(i * 11 + 3) % len(paras)]}" for i in range(20)]
    a = make_package(tmp_path, "cpt-a", {"train": [{"id": f"a{i}", "text": t}
                                                   for i, t in enumerate(first)]})
    b = make_package(tmp_path, "cpt-b", {"train": [{"id": f"b{i}", "text": t}
                                                   for i, t in enumerate(first + new)]})
    lite = tmp_path / "dict.sqlite"
    for index in (url, lite):
        ok(index, a)
        ok(index, b)
    assert index_rows(url) == index_rows(lite)
    by_batch = ("SELECT c.batch, d.batch, count(*) FROM contents c LEFT JOIN dictionaries d "
                "ON d.id = c.dictionary GROUP BY 1, 2 ORDER BY 1, 2")
    blobs = "SELECT text_z FROM contents WHERE batch = 2 ORDER BY id"
    found = []
    for index in (url, lite):
        with _engine(index).connect() as conn:
            assert [tuple(r) for r in conn.execute(text(by_batch))] == [(1, 1, 300), (2, 1, 20)]
            found.append([bytes(z) for (z,) in conn.execute(text(blobs))])
    assert found[0] == found[1]


# --------------------------------------------------------------------------- same reports


def scan_ok(index: str | Path, out: Path, *inputs: Path, workers: int = 1) -> dict[str, bytes]:
    code, _, err = run_cli("--quiet", "--index", index, "scan", "--inputs", *inputs,
                           "--output", out, "--workers", workers)
    assert (code, err) == (0, ""), err
    return tree_bytes(out)


def test_the_bundled_days_give_byte_identical_reports(url, tmp_path):
    lite = tmp_path / "cpt.sqlite"
    for day in (V1, V2, V3):
        ok(url, day)
        ok(lite, day)
    for name, pool in (("v2", (V1, V2)), ("v3", (V2, V3))):
        assert scan_ok(url, tmp_path / f"pg-{name}", *pool) == \
            scan_ok(lite, tmp_path / f"lite-{name}", *pool)


def test_a_real_text_pool_with_history_and_two_workers_gives_the_same_report(url, tmp_path):
    texts = list(stdlib_paragraphs())
    edited = [drop_every(t, 9) for t in texts[:400]] + [reverse_every(t, 11) for t in texts[400:700]]
    old = make_package(tmp_path, "cpt-old", {"train": [
        {"id": f"o{i}", "text": t, "domain": "docs"} for i, t in enumerate(texts[:700])]})
    new = make_package(tmp_path, "cpt-new", {
        "train": [{"id": f"n{i}", "text": t, "domain": "docs"}
                  for i, t in enumerate(edited + texts[700:1400] + texts[650:900])],
        "validation": [{"id": "v0", "text": texts[3], "domain": "docs"}]},
        created_at="2026-11-26T00:00:00Z")
    lite = tmp_path / "real.sqlite"
    for index in (url, lite):
        ok(index, old, workers=2)
        ok(index, new, workers=2)
    pg_report = scan_ok(url, tmp_path / "pg", new, workers=2)
    assert pg_report == scan_ok(lite, tmp_path / "lite", new, workers=2)
    relations = pg_report["relations.jsonl"]
    assert b'"history_only":true' in relations and b'"kind":"near"' in relations


def test_a_scan_overlapping_an_append_on_another_connection_reads_one_snapshot(url, tmp_path):
    texts = list(stdlib_paragraphs())
    v1 = make_package(tmp_path, "cpt-a", {"train": [
        {"id": f"a{i}", "text": t, "domain": "docs"} for i, t in enumerate(texts[:600])]})
    v2 = make_package(tmp_path, "cpt-b", {"train": [
        {"id": f"b{i}", "text": t, "domain": "docs"} for i, t in enumerate(texts[:300])]},
        created_at="2026-11-26T00:00:00Z")
    ok(url, v1)
    before = scan_ok(url, tmp_path / "before", v1)
    appended = scan_with_an_append_meanwhile(
        ["-m", "near_dedup_core"], ["--index", url, "scan", "--inputs", str(v1), "--output",
                                    str(tmp_path / "during"), "--workers", "2"],
        "scan-verify", tmp_path / "paused", lambda: ok(url, v2))
    assert "batch 2 added cpt-b" in appended
    assert tree_bytes(tmp_path / "during") == before
    after = scan_ok(url, tmp_path / "after", v1)
    assert b'"package_id":"cpt-b"' in after["relations.jsonl"]
    assert after["relations.jsonl"] != before["relations.jsonl"]


def test_the_history_probes_on_two_connections_read_the_scan_snapshot(url, tmp_path):
    """With the probe keys split over two server connections (forced here from one key on),
    a batch committed after the scan began is invisible to both: the report is the one of
    the index as the scan found it, and the same as with one connection."""
    texts = list(stdlib_paragraphs())
    pool = make_package(tmp_path, "cpt-a", {"train": [
        {"id": f"a{i}", "text": t, "domain": "docs"} for i, t in enumerate(texts[:200])]})
    later = make_package(tmp_path, "cpt-b", {"train": [  # near copies: new band rows that
        {"id": f"b{i}", "text": drop_every(t, 9), "domain": "docs"}  # match the pool
        for i, t in enumerate(texts[:100])]}, created_at="2026-11-26T00:00:00Z")
    history = make_package(tmp_path, "cpt-h", {"train": [  # so that the scan has a history
        {"id": f"h{i}", "text": drop_every(t, 9), "domain": "docs"}
        for i, t in enumerate(texts[150:200])]})
    ok(url, history)
    ok(url, pool)
    one = scan_ok(url, tmp_path / "one", pool)
    assert b'"package_id":"cpt-h"' in one["relations.jsonl"]
    code = ("import sys; from near_dedup_core import cli; from near_dedup_core.index_store import "
            "postgres; postgres.HISTORY_PROBE_MIN_KEYS = 1; sys.exit(cli.main(sys.argv[1:]))")
    appended = scan_with_an_append_meanwhile(
        ["-c", code], ["--index", url, "scan", "--inputs", str(pool), "--output",
                       str(tmp_path / "two")],
        "scan-history", tmp_path / "paused", lambda: ok(url, later))
    assert "batch 3 added cpt-b" in appended
    assert tree_bytes(tmp_path / "two") == one
    after = scan_ok(url, tmp_path / "after", pool)
    assert b'"package_id":"cpt-b"' in after["relations.jsonl"]


# --------------------------------------------------------------------------- bad states


def test_a_database_with_other_tables_is_refused(server, url):
    server.execute("CREATE TABLE pipeline (id int)", url.rsplit("/", 1)[1])
    refused(["--index", url, "index", "--inputs", V1], "not a near-dedup index")
    assert table_names(url) == ["pipeline"]


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("change, fragment", [
    (lambda u: u.rsplit("/", 1)[0] + "/no_such_db", 'database "no_such_db" does not exist'),
    (lambda u: re.sub(r":\d+/", f":{_closed_port()}/", u), "Connection refused"),
    (lambda u: re.sub(r":\d+/", ":99999/", u), "not a valid URL"),
    (lambda u: "mysql://" + u.split("://", 1)[1], "the scheme mysql:// is not supported"),
    (lambda u: u.rsplit("/", 1)[0] + "/", "names no database"),
])
def test_unreachable_missing_or_unknown_is_one_line(url, change, fragment):
    refused(["--index", change(url), "index", "--inputs", V1], fragment)
    assert table_names(url) == []


def test_a_wrong_password_is_one_line_without_the_password(server, url):
    wrong = url.replace(":near-dedup-test@", ":not-the-password@")
    err = refused(["--index", wrong, "index", "--inputs", V1], "password authentication failed")
    assert "not-the-password" not in err
    assert table_names(url) == []


def test_no_permission_to_create_tables_is_one_line(server, url):
    # PostgreSQL 15 gives PUBLIC no CREATE on schema public: a plain login role cannot
    server.execute("DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = "
                   "'reader') THEN CREATE ROLE reader LOGIN PASSWORD 'right'; END IF; END $$")
    reader = url.replace("postgres:near-dedup-test@", "reader:right@")
    err = refused(["--index", reader, "index", "--inputs", V1], "permission denied")
    assert "right@" not in err
    assert table_names(url) == []


def test_without_the_driver_the_url_is_one_line_with_the_install_hint(url, monkeypatch,
                                                                      tmp_path):
    monkeypatch.setitem(sys.modules, "psycopg", None)
    refused(["--index", url, "index", "--inputs", V1], "pip install 'near-dedup[postgres]'")
    refused(["--index", url, "scan", "--inputs", V1, "--output", tmp_path / "r"],
            "pip install 'near-dedup[postgres]'")


def test_scans_of_an_empty_a_foreign_or_another_config_database_are_one_line(
        server, url, tmp_path):
    out = tmp_path / "r"
    refused(["--index", url, "scan", "--inputs", V1, "--output", out], "index the inputs first")
    ok(url, V1)
    cfg = tmp_path / "cfg.json"
    cfg.write_text('{"threshold": 0.8}')
    refused(["--index", url, "--config", cfg, "scan", "--inputs", V1, "--output", out],
            "use a new index path")
    refused(["--index", url, "scan", "--inputs", V2, "--output", out], "index it first")
    other = server.create_database()
    server.execute("CREATE TABLE pipeline (id int)", other.rsplit("/", 1)[1])
    refused(["--index", other, "scan", "--inputs", V1, "--output", out], "not a near-dedup")
    assert not out.exists()


# --------------------------------------------------------------------------- index check


def _count(url: str, table: str) -> int:
    with _engine(url).connect() as conn:
        return conn.execute(text(f"SELECT COUNT(*) FROM {table}")).scalar_one()


def table_digests(url: str) -> dict[str, str]:
    """An md5 of every table's rows, whatever they hold (also rows an index check refuses)."""
    with _engine(url).connect() as conn:
        return {t: conn.execute(text(f"SELECT md5(string_agg(r::text, ',' ORDER BY r::text)) "
                                     f"FROM {t} r")).scalar_one() for t in table_names(url)}


def test_index_check_passes_a_fresh_index_and_needs_only_select(server, url):
    ok(url, V1)
    ok(url, V2)
    before = index_rows(url)
    expect = (f"index {index_postgres.label(url)}: OK (2 batches, 2 packages, "
              f"{_count(url, 'contents'):,} distinct texts, {_count(url, 'sources'):,} records); "
              f"pages and B-trees are the server's to check: run its pg_amcheck\n")
    code, out, err = run_cli("--index", url, "index", "check")
    assert (code, out, err) == (0, expect, "")
    # A role that may only read: the check writes nothing and needs no superuser or amcheck.
    server.execute("DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = "
                   "'checker') THEN CREATE ROLE checker LOGIN PASSWORD 'c'; END IF; END $$")
    server.execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO checker",
                   url.rsplit("/", 1)[1])
    checker = url.replace("postgres:near-dedup-test@", "checker:c@")
    code, out, err = run_cli("--index", checker, "index", "check")
    assert (code, err) == (0, "") and out.endswith(expect.split(": OK", 1)[1]), (out, err)
    assert index_rows(url) == before


@pytest.mark.parametrize("sql, fragment", [
    ("DELETE FROM contents WHERE id = (SELECT MAX(content) FROM bands)",
     "a band row names a missing content or one without a signature (16 rows)"),
    ("UPDATE contents SET text_z = '\\x00112233'::bytea WHERE id = 9",
     "the text of content row 9 does not decompress"),
    ("UPDATE contents SET norm_chars = norm_chars + 1 WHERE id = 4",
     "the text of content row 4 has "),
    ("UPDATE contents SET signature = substring(signature from 1 for 10) "
     "WHERE id = (SELECT MIN(content) FROM bands)",
     "a content's signature does not have num_perm values (1 rows)"),
    ("UPDATE sources SET package = 99 WHERE id = (SELECT MIN(id) FROM sources)",
     "a source names a missing package (1 rows)"),
    ("UPDATE contents SET dictionary = 42 WHERE id = 3", "a content names a missing dictionary"),
    ("DELETE FROM meta WHERE key = 'config'", "meta lacks config"),
], ids=["band", "text", "chars", "signature", "source", "dictionary", "meta"])
def test_index_check_names_the_first_broken_invariant_in_one_line(server, url, sql, fragment):
    ok(url, V1)
    server.execute(sql, url.rsplit("/", 1)[1])
    before = table_digests(url)
    err = refused(["--index", url, "index", "check"], fragment)
    assert err.startswith(f"near-dedup: error: index {index_postgres.label(url)}: ")
    assert "near-dedup-test" not in err
    assert table_digests(url) == before


#: Rows deleted or changed behind the tool's back, each breaking an invariant that a scan or an
#: append relies on, and the words of the one line that `index check`, `scan` and `index` all
#: print for it (as on SQLite, `test_index.DAMAGES`).
DAMAGES = {
    "source": ("DELETE FROM sources WHERE id = (SELECT MIN(id) FROM sources)",
               "the index holds 48 sources, its packages 49 records"),
    "truncate": ("TRUNCATE sources", "the index holds 0 sources, its packages 49 records"),
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


@pytest.mark.parametrize("what", list(DAMAGES))
def test_check_scan_and_append_stop_at_the_same_broken_invariant(server, url, tmp_path, what):
    sql, fragment = DAMAGES[what]
    ok(url, V1)
    server.execute(sql, url.rsplit("/", 1)[1])
    before = table_digests(url)
    line = refused(["--quiet", "--index", url, "index", "check"], fragment)
    assert line.startswith(f"near-dedup: error: index {index_postgres.label(url)}: ")
    assert refused(["--quiet", "--index", url, "scan", "--inputs", V1, "--output",
                    tmp_path / "rep"], fragment) == line
    assert not (tmp_path / "rep").exists()
    assert refused(["--quiet", "--index", url, "index", "--inputs", V1, V2], fragment) == line
    assert table_digests(url) == before


def test_a_stored_text_that_does_not_hash_to_its_content_id_stops_check_and_scan(
        server, url, tmp_path):
    """The text reader is SQLite's (`texts.IndexTexts`): a content row given another row's
    text (which decompresses to its length) is one line, not a different report."""
    ok(url, V1)
    ok(url, V2)
    code, _, err = run_cli("--quiet", "--index", url, "scan", "--inputs", V2, "--output",
                           tmp_path / "intact")
    assert (code, err) == (0, ""), err
    near = [r for r in map(orjson.loads, (tmp_path / "intact" / "relations.jsonl")
                           .read_bytes().splitlines())
            if r["kind"] == "near" and r["match"]["content_id"]]
    with _engine(url).begin() as conn:
        victim = conn.execute(text("SELECT id FROM contents WHERE encode(content_id, 'hex') "
                                   "= :c"), {"c": near[0]["match"]["content_id"]}).scalar_one()
        conn.execute(text("UPDATE contents SET (text_z, dictionary, norm_chars) = (SELECT "
                          "text_z, dictionary, norm_chars FROM contents WHERE id = :d) "
                          "WHERE id = :v"), {"d": 1 if victim != 1 else 2, "v": victim})
    fragment = f"the text of content row {victim} does not match its content_id"
    refused(["--index", url, "index", "check"], fragment)
    for workers in ("1", "2"):
        refused(["--index", url, "scan", "--inputs", V2, "--output", tmp_path / "rep",
                 "--workers", workers], f"damaged ({fragment})")
        assert not (tmp_path / "rep").exists()


def test_index_check_of_an_empty_a_foreign_or_an_unreachable_database_is_one_line(server, url):
    refused(["--index", url, "index", "check"], "empty database; not a near-dedup index")
    other = server.create_database()
    server.execute("CREATE TABLE pipeline (id int)", other.rsplit("/", 1)[1])
    refused(["--index", other, "index", "check"], "not a near-dedup index")
    closed = re.sub(r":\d+/", f":{_closed_port()}/", url)
    refused(["--index", closed, "index", "check"], "cannot use the database")
    assert table_names(url) == []


# --------------------------------------------------------------------------- kills, writers


_PAUSE = """
import os, sys, time
from near_dedup_core import cli
from near_dedup_core.ingest import batch
write_contents = batch.BatchWriter._write_contents
def write_then_pause(self, rows, *rest):
    write_contents(self, rows, *rest)
    print("paused in the transaction", file=sys.stderr, flush=True)
    time.sleep(float(os.environ.get("PAUSE_SECONDS", "600")))
batch.BatchWriter._write_contents = write_then_pause
sys.exit(cli.main(sys.argv[1:]))
"""


def _start_paused(url: str, pkg: Path, seconds: float = 600) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PAUSE_SECONDS": str(seconds)}
    proc = subprocess.Popen([sys.executable, "-c", _PAUSE, "--quiet", "--index", url, "index",
                             "--inputs", str(pkg)], env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = proc.stderr.readline()
    assert b"paused in the transaction" in line, (line, proc.poll())
    return proc


def test_sigkill_mid_append_leaves_the_database_as_before(url):
    ok(url, V1)
    before = index_rows(url)
    proc = _start_paused(url, V2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert index_rows(url) == before
    assert "batch 2 added cpt-v2" in ok(url, V2)


def test_sigkill_in_a_fold_of_bands_recent_leaves_the_database_as_before(url, tmp_path):
    paras = stdlib_paragraphs()
    days = [make_package(tmp_path, name, {"train": [{"id": f"{name}-{i}", "text": t}
                                                    for i, t in enumerate(texts)]})
            for name, texts in (("day1", paras[:160]), ("day2", paras[160:168]),
                                ("day3", paras[168:184]))]
    ok(url, days[0])
    ok(url, days[1])
    before = index_rows(url)
    sigkill_in_the_fold(url, days[2])
    assert index_rows(url) == before
    assert "lookup keys of earlier batches merged" in ok(url, days[2])


def test_sigkill_of_the_first_batch_leaves_an_empty_database(url):
    proc = _start_paused(url, V1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    wait_for_sessions_to_end(url)
    assert table_names(url) == []
    assert "batch 1 added cpt-v1" in ok(url, V1)


def test_a_second_writer_waits_for_the_first_and_both_land(url):
    ok(url, V1)
    first = _start_paused(url, V2, seconds=2)
    # started while the first holds the lock in its transaction: it lands after the first
    out = ok(url, V3)  # waits on the advisory lock until the first commits
    assert first.wait(timeout=60) == 0
    assert "batch 3 added cpt-v3" in out
    rows = index_rows(url)
    assert [b[0] for b in rows["batches"]] == [1, 2, 3]


def test_a_writer_that_cannot_get_the_lock_in_time_is_busy(url, monkeypatch):
    ok(url, V1)
    holder = _start_paused(url, V2, seconds=30)
    try:
        monkeypatch.setenv("NEAR_DEDUP_BUSY_TIMEOUT", "0.5")
        refused(["--index", url, "index", "--inputs", V3], "busy")
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)


def test_the_index_location_in_messages_never_shows_a_password():
    assert index_postgres.label("postgresql://u:secret@h:5/db") == "postgresql://u@h:5/db"
    assert index_postgres.label("postgresql://u:s:e@cret@h/db?x=1") == "postgresql://u@h/db"


@pytest.mark.parametrize("recent_rows", [0, 100_000])
def test_the_history_join_probes_the_band_index_whatever_the_statistics(url, recent_rows):
    """The scan's history join runs as one index probe of each band table per probe key: on
    a band table of 1.2·10^8 rows the planner's choice for a plain join (it puts ~50 rows
    behind a key) read the whole table, 5× slower. Here band tables whose statistics say the
    same, with ``bands_recent`` empty or not."""
    ok(url, V1)  # the schema
    conn = index_postgres.connect(url, snapshot=True)
    try:
        for table, rows, offset in (("bands", 400_000, 0), ("bands_recent", recent_rows, 7)):
            conn.execute(f"INSERT INTO {table} (key, content) SELECT g / 50 + {offset}, "
                         f"c.ids[1 + g % c.n] FROM generate_series(1, {rows}) g, "
                         f"(SELECT array_agg(id ORDER BY id) AS ids, count(*) AS n "
                         f"FROM contents) c ON CONFLICT DO NOTHING")
            conn.execute(f"ANALYZE {table}")
        (pool_content,) = conn.execute("SELECT min(id) FROM contents").fetchone()
        conn.execute("CREATE TEMP TABLE scan_keys (key BIGINT PRIMARY KEY)")
        conn.execute("CREATE TEMP TABLE scan_contents (id BIGINT PRIMARY KEY)")
        conn.execute("INSERT INTO scan_keys SELECT g * 97 FROM generate_series(1, 40000) g")
        conn.execute("INSERT INTO scan_contents VALUES (%s)", (pool_content,))
        conn.execute("ANALYZE scan_keys")
        plain = ("SELECT b.key, b.content FROM scan_keys q JOIN (SELECT * FROM bands UNION ALL "
                 "SELECT * FROM bands_recent) b ON b.key = q.key "
                 "WHERE NOT EXISTS (SELECT 1 FROM scan_contents c WHERE c.id = b.content)")

        def plan(sql: str) -> str:
            return "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql))

        assert "Seq Scan on bands " in plan(plain)  # the planner's own choice: all of bands
        unpinned = plan(index_postgres.HISTORY_JOIN_SQL)  # LATERAL … OFFSET 0 alone: probes
        assert "Seq Scan on bands " not in unpinned and "bands_pkey" in unpinned, unpinned
        conn.execute("SET LOCAL enable_seqscan = off")  # as history_band_hits runs it
        probing = plan(index_postgres.HISTORY_JOIN_SQL)
        assert "Seq Scan on bands" not in probing, probing
        for table in index_store.BAND_TABLES:
            assert re.search(rf"Index (Only )?Scan using {table}_pkey on {table}", probing), \
                probing
        rows = conn.execute(index_postgres.HISTORY_JOIN_SQL).fetchall()
        conn.execute("SET LOCAL enable_seqscan = on")
        assert sorted(rows) == sorted(conn.execute(plain).fetchall()) and rows
        assert all(content != pool_content for _, content in rows)
    finally:
        conn.rollback()
        conn.close()


def test_the_pool_splits_probe_the_sources_index(url):
    """The splits of the pool's contents are read by one probe of ``ix_sources_content`` per
    content: as a plain join the planner hashes every source row (3.1 s against 0.3 s at
    1.2·10^7 sources). Here a sources table large enough for the planner to say so."""
    ok(url, V1)
    conn = index_postgres.connect(url, snapshot=True)
    try:
        conn.execute("INSERT INTO sources (content, package, sample_id, split, file, line, "
                     "position, text_sha256) SELECT g % 50000, 1, 's' || g, 'train', 'f', g, g, "
                     "'\\x00' FROM generate_series(1, 300000) g")
        conn.execute("ANALYZE sources")
        conn.execute("CREATE TEMP TABLE scan_contents (id BIGINT PRIMARY KEY)")
        conn.execute("INSERT INTO scan_contents SELECT generate_series(1, 20000)")
        plain = ("SELECT DISTINCT s.content, s.split FROM scan_contents t "
                 "JOIN sources s ON s.content = t.id")

        def plan(sql: str) -> str:
            return "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql))

        assert "Seq Scan on sources" in plan(plain)  # the planner's own choice
        probing = plan(index_postgres.POOL_SPLITS_SQL)
        assert "Seq Scan on sources" not in probing and "ix_sources_content" in probing, probing
        assert sorted(conn.execute(index_postgres.POOL_SPLITS_SQL).fetchall()) == \
            sorted(conn.execute(plain).fetchall())
    finally:
        conn.rollback()
        conn.close()
