"""An index or a report that was damaged or replaced is refused in one line, exit 1, with
nothing written: flipped bytes inside a stored text or an Iceberg data file, a foreign or
empty ``catalog.db``, commit pointers that disagree, a malformed
``NEAR_DEDUP_ICEBERG_BUCKETS``, a report whose inputs were redirected (docs/tamper.md,
docs/iceberg.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import SAMPLES, refused, run_cli, tree_bytes

pytest.importorskip("pyiceberg", reason="pip install 'near-dedup[iceberg]'")

CPT = SAMPLES / "cpt"
V1 = CPT / "2026-11-25" / "cpt-v1"
V2 = CPT / "2026-11-26" / "cpt-v2"


def ice(folder: Path) -> str:
    return f"iceberg://{folder.resolve()}"


@pytest.mark.parametrize("value", ["0", "-3", "many", "65537"])
def test_a_malformed_bucket_count_is_one_line_and_writes_nothing(tmp_path, monkeypatch, value):
    monkeypatch.setenv("NEAR_DEDUP_ICEBERG_BUCKETS", value)
    line = refused(["--quiet", "--index", ice(tmp_path / "ice"), "index", "--inputs", V1],
                   "NEAR_DEDUP_ICEBERG_BUCKETS", "from 1 to 65,536")
    assert "Warning" not in line
    assert not (tmp_path / "ice").exists()


def test_a_bucket_count_in_range_is_taken(tmp_path, monkeypatch):
    monkeypatch.setenv("NEAR_DEDUP_ICEBERG_BUCKETS", "3")
    code, _, err = run_cli("--quiet", "--index", ice(tmp_path / "ice"), "index", "--inputs", V1)
    assert (code, err) == (0, "")
    code, out, err = run_cli("--index", ice(tmp_path / "ice"), "index", "check")
    assert code == 0, err


V3 = CPT / "2026-11-27" / "cpt-v3"


def two_batches(index: str | Path) -> None:
    for pkg in (V1, V2):
        code, _, err = run_cli("--quiet", "--index", index, "index", "--inputs", pkg)
        assert (code, err) == (0, ""), err


def flip(path: Path, at: float, count: int) -> None:
    data = bytearray(path.read_bytes())
    start = int(len(data) * at)
    data[start:start + count] = bytes(b ^ 0xFF for b in data[start:start + count])
    path.write_bytes(bytes(data))


def newest_contents_file(folder: Path) -> Path:
    files = sorted((folder / "warehouse" / "near_dedup" / "contents" / "data").glob("*.parquet"),
                   key=lambda p: p.stat().st_mtime_ns)
    return files[-1]


@pytest.mark.parametrize("at, count", [(0.5, 64), (0.7, 8)], ids=["64-at-50%", "8-at-70%"])
def test_flipped_bytes_in_an_iceberg_data_file_are_one_line_for_check_scan_and_index(
        tmp_path, at, count):
    folder = tmp_path / "ice"
    two_batches(ice(folder))
    flip(newest_contents_file(folder), at, count)
    before = tree_bytes(folder)
    refused(["--quiet", "--index", ice(folder), "index", "check"], f"index {ice(folder)}: damaged (")
    out = tmp_path / "report"
    refused(["--quiet", "--index", ice(folder), "scan", "--inputs", V2, "--output", out],
            f"index {ice(folder)}: damaged (")
    assert not out.exists()
    refused(["--quiet", "--index", ice(folder), "index", "--inputs", V3], f"index {ice(folder)}: damaged (")
    assert tree_bytes(folder) == before


def test_an_iceberg_index_without_page_checksums_is_read_and_check_says_so(tmp_path,
                                                                          monkeypatch):
    from near_dedup_core.index_store.iceberg import datafiles

    folder = tmp_path / "ice"
    with monkeypatch.context() as m:  # data files as earlier versions wrote them
        m.setattr(datafiles, "CHECKED_WRITES", {})
        m.setattr(datafiles, "with_checksum_mark", lambda schema: schema)
        two_batches(ice(folder))
    code, out, err = run_cli("--index", ice(folder), "index", "check")
    assert code == 0, err
    assert "data files without page checksums (written by an earlier version): read in full, " \
           "their pages not checked" in out
    code, _, err = run_cli("--quiet", "--index", ice(folder), "scan", "--inputs", V2,
                           "--output", tmp_path / "report")
    assert (code, err) == (0, "")
    code, _, err = run_cli("--quiet", "--index", ice(folder), "index", "--inputs", V3)
    assert (code, err) == (0, "")


# --------------------------------------------------------------------------- stored texts

#: Content row ``victim`` takes the stored text of row ``donor`` (its frame, dictionary and
#: length): the text decompresses to its norm_chars, and no longer hashes to its content_id.
SWAP_TEXT = ("UPDATE contents SET (text_z, dictionary, norm_chars) = (SELECT text_z, "
             "dictionary, norm_chars FROM contents WHERE id = {donor}) WHERE id = {victim}")


def test_a_stored_text_that_does_not_hash_to_its_content_id_is_one_line(tmp_path):
    import sqlite3

    index = tmp_path / "index.sqlite"
    two_batches(index)
    code, _, err = run_cli("--quiet", "--index", index, "scan", "--inputs", V2,
                           "--output", tmp_path / "intact")
    assert (code, err) == (0, ""), err
    near = [json.loads(line) for line in
            (tmp_path / "intact" / "relations.jsonl").read_text().splitlines()]
    near = [r for r in near if r["kind"] == "near" and r["match"]["content_id"]]
    assert near
    con = sqlite3.connect(index)
    (victim,) = con.execute("SELECT id FROM contents WHERE hex(content_id) = upper(?)",
                            (near[0]["match"]["content_id"],)).fetchone()
    (donor,) = con.execute("SELECT MIN(id) FROM contents WHERE id != ? AND norm_chars > 300",
                           (victim,)).fetchone()
    con.execute(SWAP_TEXT.format(donor=donor, victim=victim))
    con.commit()
    con.close()
    refused(["--quiet", "--index", index, "index", "check"],
            f"index {index}: the text of content row {victim} does not match its content_id")
    out = tmp_path / "report"
    for workers in ("1", "2"):
        refused(["--quiet", "--index", index, "scan", "--inputs", V2, "--output", out, "--workers",
                 workers], f"index {index}: damaged (the text of content row {victim} does "
                           f"not match its content_id)")
        assert not out.exists()


# --------------------------------------------------------------------------- foreign catalogs


def foreign_catalog(folder: Path, kind: str) -> None:
    import sqlite3

    folder.mkdir()
    path = folder / "catalog.db"
    if kind == "empty file":
        path.write_bytes(b"")
        return
    con = sqlite3.connect(path)
    if kind == "another program's":
        con.execute("PRAGMA journal_mode = WAL")
        con.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY, name TEXT)")
        con.execute("INSERT INTO jobs (name) VALUES ('nightly')")
    else:  # an empty SQLite database
        con.execute("CREATE TABLE t (x)")
        con.execute("DROP TABLE t")
    con.commit()
    con.close()


@pytest.mark.parametrize("kind", ["empty file", "empty database", "another program's"])
def test_a_foreign_catalog_db_is_refused_by_every_command_and_left_as_it_was(tmp_path, kind):
    folder = tmp_path / "ice"
    foreign_catalog(folder, kind)
    before = tree_bytes(folder)
    fragment = f"{folder / 'catalog.db'} is not an Iceberg catalog ("
    for argv in (["index", "--inputs", V1], ["index", "check"], ["index", "compact"],
                 ["index", "expire"], ["scan", "--inputs", V1, "--output", tmp_path / "r"]):
        refused(["--quiet", "--index", ice(folder), *argv], fragment, "not a near-dedup index")
        assert tree_bytes(folder) == before, argv
    assert not (tmp_path / "r").exists()


def test_a_commits_pointer_moved_back_in_the_catalog_is_one_line_for_check_and_index(tmp_path):
    import sqlite3

    folder = tmp_path / "ice"
    two_batches(ice(folder))
    con = sqlite3.connect(folder / "catalog.db")
    moved = con.execute("UPDATE iceberg_tables SET metadata_location = "
                        "previous_metadata_location WHERE table_name = 'commits'").rowcount
    con.commit()
    con.close()
    assert moved == 1
    before = tree_bytes(folder)
    fragment = ("damaged (the catalog points the commits table at commit 1, its metadata "
                f"{folder.resolve()}/warehouse/near_dedup/commits/metadata/")
    refused(["--quiet", "--index", ice(folder), "index", "check"], fragment,
            "records commit 2, which the data tables hold")
    refused(["--quiet", "--index", ice(folder), "index", "--inputs", V3], fragment)
    refused(["--quiet", "--index", ice(folder), "index", "compact"], fragment)
    assert tree_bytes(folder) == before


def test_bytes_flipped_inside_a_stored_text_of_a_sqlite_file_are_one_line(tmp_path):
    """64 bytes flipped in a stored zstd frame, in the file itself: the frame still
    decompresses to its length (no SQLite or zstd check sees it), the text no longer hashes
    to its content_id."""
    import sqlite3

    import zstandard

    index = tmp_path / "index.sqlite"
    two_batches(index)
    code, _, err = run_cli("--quiet", "--index", index, "scan", "--inputs", V2,
                           "--output", tmp_path / "intact")
    assert (code, err) == (0, ""), err
    matched = {r["match"]["content_id"] for r in map(json.loads, (
        tmp_path / "intact" / "relations.jsonl").read_text().splitlines())
        if r["kind"] == "near" and r["match"]["content_id"]}
    con = sqlite3.connect(index)
    rows = con.execute("SELECT c.id, c.text_z, c.norm_chars, d.data FROM contents c LEFT JOIN "
                       "dictionaries d ON d.id = c.dictionary WHERE lower(hex(c.content_id)) "
                       "IN (%s) ORDER BY c.id" % ",".join("?" * len(matched)),
                       sorted(matched)).fetchall()
    con.close()
    data = bytearray(index.read_bytes())
    victim = None
    for cid, blob, chars, dictionary in rows:
        at = data.find(blob)
        if at < 0 or len(blob) < 200:
            continue
        start = at + len(blob) // 2 - 32
        flipped = bytes(data[start:start + 64])
        changed = bytes(b ^ 0x5A for b in flipped)
        frame = blob[:start - at] + changed + blob[start - at + 64:]
        dctx = zstandard.ZstdDecompressor(
            dict_data=zstandard.ZstdCompressionDict(dictionary) if dictionary else None)
        try:
            text = dctx.decompress(frame).decode()
        except (zstandard.ZstdError, UnicodeDecodeError):
            continue
        if len(text) == chars:
            data[start:start + 64] = changed
            victim = cid
            break
    assert victim is not None, "no stored frame keeps its length with 64 bytes flipped"
    index.write_bytes(bytes(data))
    refused(["--quiet", "--index", index, "index", "check"],
            f"the text of content row {victim} does not match its content_id")
    refused(["--quiet", "--index", index, "scan", "--inputs", V2, "--output", tmp_path / "report"],
            f"damaged (the text of content row {victim} does not match its content_id)")
    assert not (tmp_path / "report").exists()
