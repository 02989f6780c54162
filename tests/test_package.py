"""Snapshot packages: every validation rule through `snapshot validate`, creation, streaming."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest
from helpers import make_package, refused, run_cli, tree_bytes, update_manifest

from near_dedup_core import package as pkgmod
from near_dedup_core.package import blocks as pkgblocks

IMG = "ab" * 32


def cpt_records(prefix: str = "s", n: int = 3) -> list[dict]:
    return [{"id": f"{prefix}{i}", "text": f"Record number {i} of a plain CPT shard.",
             "domain": "web", "source": {"dataset": "unit", "row": i}} for i in range(n)]


def sft_record(sample_id: str, **extra) -> dict:
    record = {"id": sample_id, "domain": "filings", "task": "extract_kpi",
              "system": "You extract figures.",
              "material": {"text": "Revenue was 4.2 million USD.", "images": [{"sha256": IMG}]},
              "messages": [{"role": "user", "content": "What was revenue?"},
                           {"role": "assistant", "content": "4.2 million USD."}],
              "source": {"dataset": "unit"}}
    record.update(extra)
    return record


def cpt_package(tmp_path, package_id="cpt-v1", **kwargs):
    splits = kwargs.pop("splits", None) or {"train": cpt_records(),
                                            "validation": cpt_records("v", 1)}
    return make_package(tmp_path, package_id, splits, **kwargs)


def assert_refused(argv, package: str, *fragments: str) -> str:
    """Refused in one line (`helpers.refused`) that names ``package`` first."""
    line = refused(argv, *fragments)
    assert line.startswith(f"near-dedup: error: package {package}"), line
    return line


def assert_invalid(paths, package: str, *fragments: str) -> str:
    before = {str(p): tree_bytes(p) for p in paths if p.is_dir()}
    err = assert_refused(["snapshot", "validate", *paths], package, *fragments)
    assert {str(p): tree_bytes(p) for p in paths if p.is_dir()} == before
    return err


# ------------------------------------------------------------------ valid packages


def test_valid_package_validates(tmp_path):
    pkg = cpt_package(tmp_path, shard_records=2)
    code, out, err = run_cli("snapshot", "validate", pkg)
    assert (code, err) == (0, "")
    sha = hashlib.sha256((pkg / "manifest.json").read_bytes()).hexdigest()
    assert out == f"valid: cpt-v1 (cpt, 4 records, manifest sha256 {sha})\n"


def test_open_packages_attributes(tmp_path):
    pkg = cpt_package(tmp_path, parents=["cpt-v0"], shard_records=2)
    [opened] = pkgmod.open_packages([pkg])
    assert opened.path == pkg and opened.package_id == "cpt-v1" and opened.kind == "cpt"
    assert opened.tokenizer == {"name": "qwen2-tok", "revision": "r3"}
    assert opened.parents == ["cpt-v0"] and opened.depends_on == []
    assert opened.record_count == 4 and opened.splits == ["train", "validation"]
    assert [f.path for f in opened.files] == ["data/train/part-00000.jsonl",
                                              "data/train/part-00001.jsonl",
                                              "data/validation/part-00000.jsonl"]
    assert opened.files[0].records == 2 and opened.files[1].records == 1
    assert opened.manifest["format_version"] == 2


def test_stream_records_dependency_order_positions_and_refs(tmp_path):
    v1 = make_package(tmp_path, "sft-v1", {"train": [sft_record("q1"), sft_record("q2")]},
                      kind="sft")
    v2 = make_package(tmp_path, "sft-v2",
                      {"train": [{"id": "r1", "ref": {"package_id": "sft-v1", "id": "q2"},
                                  "domain": "filings"}],
                       "validation": [sft_record("q9")]},
                      kind="sft", depends_on=["sft-v1"], parents=["sft-v1"])
    packages = pkgmod.open_packages([v2, v1])
    assert [p.package_id for p in packages] == ["sft-v2", "sft-v1"]
    records = list(pkgmod.stream_records(packages))
    assert [(r.package_id, r.sample_id, r.split, r.file, r.line, r.position, r.ref)
            for r in records] == [
        ("sft-v1", "q1", "train", "data/train/part-00000.jsonl", 1, 0, None),
        ("sft-v1", "q2", "train", "data/train/part-00000.jsonl", 2, 1, None),
        ("sft-v2", "r1", "train", "data/train/part-00000.jsonl", 1, 0, ("sft-v1", "q2")),
        ("sft-v2", "q9", "validation", "data/validation/part-00000.jsonl", 1, 1, None),
    ]
    assert records[0].data == sft_record("q1")


def test_gzip_shards_validate_and_stream(tmp_path):
    pkg = cpt_package(tmp_path, gz=True, shard_records=2)
    assert (pkg / "data/train/part-00000.jsonl.gz").read_bytes()[:2] == b"\x1f\x8b"
    code, out, err = run_cli("snapshot", "validate", pkg)
    assert (code, err) == (0, "") and "4 records" in out
    records = list(pkgmod.stream_records(pkgmod.open_packages([pkg])))
    assert [r.sample_id for r in records] == ["s0", "s1", "s2", "v0"]
    assert records[2].file == "data/train/part-00001.jsonl.gz" and records[2].line == 1


def test_gzip_shard_sha256_is_of_the_stored_bytes(tmp_path):
    pkg = cpt_package(tmp_path, gz=True)
    shard = pkg / "data/train/part-00000.jsonl.gz"
    same_lines = gzip.compress(gzip.decompress(shard.read_bytes()), compresslevel=1, mtime=7)
    shard.write_bytes(same_lines)
    update_manifest(pkg, lambda m: m["files"][0].update(bytes=len(same_lines)))
    assert_invalid([pkg], "cpt-v1", "data/train/part-00000.jsonl.gz", "sha256")


def test_corrupt_gzip_shard(tmp_path):
    pkg = cpt_package(tmp_path, gz=True)
    shard = pkg / "data/train/part-00000.jsonl.gz"
    data = bytearray(shard.read_bytes())
    data[-12:] = b"\0" * 12
    shard.write_bytes(bytes(data))
    assert_invalid([pkg], "cpt-v1", "data/train/part-00000.jsonl.gz", "cannot read")


def test_last_line_without_newline_is_a_record(tmp_path):
    pkg = cpt_package(tmp_path, splits={"train": cpt_records()})
    shard = pkg / "data/train/part-00000.jsonl"
    data = shard.read_bytes().rstrip(b"\n")
    shard.write_bytes(data)
    update_manifest(pkg, lambda m: m["files"][0].update(
        bytes=len(data), sha256=hashlib.sha256(data).hexdigest()))
    code, out, _ = run_cli("snapshot", "validate", pkg)
    assert code == 0 and "3 records" in out


# ------------------------------------------------------------------ manifest rules


def test_missing_package_directory(tmp_path):
    assert_invalid([tmp_path / "nope"], str(tmp_path / "nope"), "no such package directory")


def test_missing_manifest(tmp_path):
    pkg = cpt_package(tmp_path)
    (pkg / "manifest.json").unlink()
    assert_invalid([pkg], str(pkg), "manifest.json is missing")


def test_manifest_not_json(tmp_path):
    pkg = cpt_package(tmp_path)
    (pkg / "manifest.json").write_text('{"format": "training-snapshot",', encoding="utf-8")
    assert_invalid([pkg], str(pkg), "manifest.json: not valid JSON")


def test_manifest_not_an_object(tmp_path):
    pkg = cpt_package(tmp_path)
    (pkg / "manifest.json").write_text("[]\n", encoding="utf-8")
    assert_invalid([pkg], str(pkg), "manifest.json: must be a JSON object")


@pytest.mark.parametrize("field, value, fragment", [
    ("format", "training-snapshots", "format must be 'training-snapshot'"),
    ("format_version", 1, "format_version must be 2, found 1"),
    ("format_version", "2", "format_version must be 2, found '2'"),
    ("kind", "dpo", "kind must be one of cpt, sft, found 'dpo'"),
    ("created_at", None, "created_at must be a non-empty string"),
    ("lineage", {"parents": []}, "lineage must be an object"),
    ("lineage", {"parents": [], "depends_on": "cpt-v0"}, "lineage must be an object"),
    ("lineage", {"parents": ["a b"], "depends_on": []}, "lineage.parents entry 'a b'"),
    ("lineage", {"parents": [], "depends_on": ["cpt-v1"]}, "depends_on names the package itself"),
    ("files", {}, "files must be a list"),
    ("colour", "red", "colour is not a field of the manifest (unknown key)"),
    ("tokenizer", {"name": "t", "revision": "r", "vocab": 3},
     "tokenizer.vocab is not a field of the manifest (unknown key)"),
])
def test_manifest_fields(tmp_path, field, value, fragment):
    pkg = cpt_package(tmp_path)
    update_manifest(pkg, lambda m: m.update({field: value}))
    assert_invalid([pkg], "cpt-v1", "manifest.json", fragment)


def test_bad_package_id(tmp_path):
    pkg = cpt_package(tmp_path)
    update_manifest(pkg, lambda m: m.update(package_id="cpt v1"))
    assert_invalid([pkg], str(pkg), "manifest.json: package_id must match", "'cpt v1'")


def test_cpt_without_tokenizer(tmp_path):
    pkg = cpt_package(tmp_path)
    update_manifest(pkg, lambda m: m.pop("tokenizer"))
    assert_invalid([pkg], "cpt-v1", "manifest.json: tokenizer is required for cpt")


def test_tokenizer_without_revision(tmp_path):
    pkg = cpt_package(tmp_path)
    update_manifest(pkg, lambda m: m.update(tokenizer={"name": "qwen2-tok"}))
    assert_invalid([pkg], "cpt-v1", "manifest.json: tokenizer")


def test_sft_needs_no_tokenizer(tmp_path):
    pkg = make_package(tmp_path, "sft-v1", {"train": [sft_record("q1")]}, kind="sft")
    assert "tokenizer" not in json.loads((pkg / "manifest.json").read_text())
    assert run_cli("snapshot", "validate", pkg)[0] == 0


@pytest.mark.parametrize("key, value, fragment", [
    ("path", "train/part-00000.jsonl", "inside data/"),
    ("path", "data/../manifest.json", "inside data/"),
    ("path", "/etc/passwd", "inside data/"),
    ("path", "data/train/part-00000.json", "must end with .jsonl"),
    ("split", "", "files[0].split"),
    ("records", -1, "files[0].records"),
    ("bytes", "12", "files[0].bytes"),
    ("sha256", "AB" * 32, "files[0].sha256"),
    ("colour", "red", "files[0].colour is not a field of the manifest (unknown key)"),
])
def test_file_entry_fields(tmp_path, key, value, fragment):
    pkg = cpt_package(tmp_path)
    update_manifest(pkg, lambda m: m["files"][0].update({key: value}))
    assert_invalid([pkg], "cpt-v1", "manifest.json", fragment)


def test_file_listed_twice(tmp_path):
    pkg = cpt_package(tmp_path)
    update_manifest(pkg, lambda m: m["files"].append(dict(m["files"][0])))
    assert_invalid([pkg], "cpt-v1", "manifest.json", "listed twice")


def test_missing_file(tmp_path):
    pkg = cpt_package(tmp_path, shard_records=2)
    (pkg / "data/train/part-00001.jsonl").unlink()
    assert_invalid([pkg], "cpt-v1", "data/train/part-00001.jsonl", "missing")


def test_symlinked_shard_outside_data(tmp_path):
    pkg = cpt_package(tmp_path)
    outside = tmp_path / "elsewhere.jsonl"
    shard = pkg / "data/train/part-00000.jsonl"
    outside.write_bytes(shard.read_bytes())
    shard.unlink()
    shard.symlink_to(outside)
    assert_invalid([pkg], "cpt-v1", "data/train/part-00000.jsonl", "outside")


def test_symlinked_data_folder_outside_the_package(tmp_path):
    """A data/ folder that is a symlink to an identical copy elsewhere is refused like a
    symlinked shard: the package must hold its own data."""
    pkg = cpt_package(tmp_path)
    outside = tmp_path / "elsewhere-data"
    shutil.copytree(pkg / "data", outside)
    shutil.rmtree(pkg / "data")
    (pkg / "data").symlink_to(outside, target_is_directory=True)
    assert_invalid([pkg], "cpt-v1", "data/", "symlink")


def test_bytes_mismatch(tmp_path):
    pkg = cpt_package(tmp_path)
    update_manifest(pkg, lambda m: m["files"][0].update(bytes=m["files"][0]["bytes"] + 1))
    assert_invalid([pkg], "cpt-v1", "data/train/part-00000.jsonl", "size is", "file changed")


def test_sha256_mismatch(tmp_path):
    pkg = cpt_package(tmp_path)
    shard = pkg / "data/train/part-00000.jsonl"
    shard.write_bytes(shard.read_bytes().replace(b"number 1", b"number 7"))
    assert_invalid([pkg], "cpt-v1", "data/train/part-00000.jsonl", "sha256", "file changed")


def test_records_mismatch(tmp_path):
    pkg = cpt_package(tmp_path)
    update_manifest(pkg, lambda m: m["files"][0].update(records=4))
    assert_invalid([pkg], "cpt-v1", "data/train/part-00000.jsonl",
                   "has 3 records, manifest.json says 4")


def test_unlisted_file_under_data(tmp_path):
    pkg = cpt_package(tmp_path)
    (pkg / "data/train/part-00001.jsonl").write_bytes(b"")
    assert_invalid([pkg], "cpt-v1", "data/train/part-00001.jsonl", "not listed")


def test_empty_package(tmp_path):
    pkg = cpt_package(tmp_path, splits={"train": []})
    assert_invalid([pkg], "cpt-v1", "manifest.json", "empty")


# ------------------------------------------------------------------ record rules


def bad_line(tmp_path, line, kind="cpt", line_no=2):
    """A package whose train shard has ``line`` as line ``line_no``; returns the error."""
    good = cpt_records() if kind == "cpt" else [sft_record("q0"), sft_record("q1")]
    records = good[:line_no - 1] + [line] + good[line_no - 1:]
    pkg = make_package(tmp_path, f"{kind}-v1", {"train": records}, kind=kind)
    return assert_invalid([pkg], f"{kind}-v1", f"data/train/part-00000.jsonl:{line_no}:")


def test_bad_utf8_line(tmp_path):
    err = bad_line(tmp_path, b'{"id": "x", "text": "caf\xe9"}')
    assert "not valid UTF-8" in err


def test_not_json_line(tmp_path):
    assert "not valid JSON" in bad_line(tmp_path, b'{"id": "x", "text": }')


def test_empty_line(tmp_path):
    assert "empty line" in bad_line(tmp_path, b"\n")


@pytest.mark.parametrize("line", [b"[1, 2]", b'"text"', b"null"])
def test_non_object_line(tmp_path, line):
    assert "not a JSON object" in bad_line(tmp_path, line)


@pytest.mark.parametrize("record, fragment", [
    ({"text": "no id"}, "missing field 'id'"),
    ({"id": "", "text": "empty id"}, "field 'id' must be a non-empty string"),
    ({"id": 7, "text": "number id"}, "field 'id' must be a non-empty string, found int"),
    ({"id": "x"}, "missing field 'text'"),
    ({"id": "x", "text": ["a"]}, "field 'text' must be a string, found list"),
    ({"id": "x", "text": "t", "domain": 3}, "field 'domain' must be a string"),
    ({"id": "x", "text": "t", "source": "web"}, "field 'source' must be an object"),
])
def test_cpt_record_fields(tmp_path, record, fragment):
    assert fragment in bad_line(tmp_path, record)


@pytest.mark.parametrize("change, fragment", [
    ({"task": None}, "field 'task' must be a string, found null"),
    ({"messages": []}, "field 'messages' must be a non-empty list"),
    ({"messages": "hi"}, "field 'messages' must be a non-empty list"),
    ({"messages": [{"role": "user"}]}, "messages[0] must be an object"),
    ({"messages": [{"role": "user", "content": "a"}, {"role": 1, "content": "b"}]},
     "messages[1] must be an object"),
    ({"system": 5}, "field 'system' must be a string"),
    ({"material": "text"}, "field 'material' must be an object"),
    ({"material": {"text": 1}}, "field 'material.text' must be a string"),
    ({"material": {"images": {"sha256": IMG}}}, "field 'material.images' must be a list"),
    ({"material": {"images": [{"sha256": IMG.upper()}]}}, "material.images[0]"),
    ({"material": {"images": [{"sha256": IMG[:-1]}]}}, "material.images[0]"),
    ({"domain": ["filings"]}, "field 'domain' must be a string"),
])
def test_sft_record_fields(tmp_path, change, fragment):
    assert fragment in bad_line(tmp_path, sft_record("x", **change), kind="sft")


def test_sft_missing_task(tmp_path):
    record = sft_record("x")
    del record["task"]
    assert "missing field 'task'" in bad_line(tmp_path, record, kind="sft")


def test_sft_optional_fields_may_be_absent(tmp_path):
    record = {"id": "q1", "task": "summarize",
              "messages": [{"role": "user", "content": "Summarize."}], "extra": [1, 2]}
    pkg = make_package(tmp_path, "sft-v1", {"train": [record]}, kind="sft")
    assert run_cli("snapshot", "validate", pkg)[0] == 0


def test_duplicate_id(tmp_path):
    records = cpt_records() + [{"id": "s1", "text": "again"}]
    pkg = make_package(tmp_path, "cpt-v1", {"train": cpt_records("v", 1), "zz": records})
    assert_invalid([pkg], "cpt-v1", "data/zz/part-00000.jsonl:4:", "duplicate id 's1'")


def test_duplicate_id_across_splits(tmp_path):
    pkg = make_package(tmp_path, "cpt-v1", {"train": cpt_records(), "validation": cpt_records()})
    assert_invalid([pkg], "cpt-v1", "data/validation/part-00000.jsonl:1:", "duplicate id 's0'")


def sft_pair(tmp_path, ref_record, depends_on=("sft-v1",)):
    v1 = make_package(tmp_path, "sft-v1", {"train": [sft_record("q1")]}, kind="sft")
    v2 = make_package(tmp_path, "sft-v2", {"train": [sft_record("n1"), ref_record]},
                      kind="sft", depends_on=list(depends_on))
    return v1, v2


def test_ref_to_package_not_in_depends_on(tmp_path):
    v1, v2 = sft_pair(tmp_path, {"id": "r1", "ref": {"package_id": "sft-v1", "id": "q1"}},
                      depends_on=())
    assert_invalid([v1, v2], "sft-v2", "data/train/part-00000.jsonl:2:",
                   "ref names package 'sft-v1', which is not in this package's "
                   "lineage.depends_on")


def test_depends_on_not_among_inputs(tmp_path):
    _, v2 = sft_pair(tmp_path, {"id": "r1", "ref": {"package_id": "sft-v1", "id": "q1"}})
    assert_invalid([v2], "sft-v2", "manifest.json", "depends_on names package sft-v1",
                   "not among the inputs")


def test_ref_to_missing_id(tmp_path):
    v1, v2 = sft_pair(tmp_path, {"id": "r1", "ref": {"package_id": "sft-v1", "id": "q404"}})
    assert_invalid([v2, v1], "sft-v2", "data/train/part-00000.jsonl:2:",
                   "ref to sample 'q404' of package sft-v1")


@pytest.mark.parametrize("ref_record, fragment", [
    ({"id": "r1", "ref": "sft-v1/q1"}, "field 'ref' must be an object"),
    ({"id": "r1", "ref": {"package_id": "sft-v1"}}, "field 'ref' must be an object"),
    ({"id": "r1", "ref": {"package_id": "sft-v1", "id": "q1"}, "task": "summarize"},
     "must not carry content field 'task'"),
    ({"id": "r1", "ref": {"package_id": "sft-v1", "id": "q1"}, "source": 1},
     "field 'source' must be an object"),
])
def test_ref_record_shape(tmp_path, ref_record, fragment):
    v1, v2 = sft_pair(tmp_path, ref_record)
    assert_invalid([v1, v2], "sft-v2", "data/train/part-00000.jsonl:2:", fragment)


def test_cpt_ref_must_not_carry_text(tmp_path):
    v1 = cpt_package(tmp_path)
    v2 = make_package(tmp_path, "cpt-v2", {"train": [
        {"id": "r1", "ref": {"package_id": "cpt-v1", "id": "s0"}, "text": "own text"}]},
        depends_on=["cpt-v1"])
    assert_invalid([v1, v2], "cpt-v2", "data/train/part-00000.jsonl:1:", "content field 'text'")


def test_dependency_cycle(tmp_path):
    a = make_package(tmp_path, "sft-a", {"train": [sft_record("q1")]}, kind="sft",
                     depends_on=["sft-b"])
    b = make_package(tmp_path, "sft-b", {"train": [sft_record("q1")]}, kind="sft",
                     depends_on=["sft-a"])
    assert_invalid([a, b], "sft-a", "manifest.json", "cycle (sft-a -> sft-b -> sft-a)")


# ------------------------------------------------------------------ rules across inputs


def test_mixed_kinds(tmp_path):
    cpt = cpt_package(tmp_path)
    sft = make_package(tmp_path, "sft-v1", {"train": [sft_record("q1")]}, kind="sft")
    assert_invalid([cpt, sft], "sft-v1", "kind sft differs from kind cpt of package cpt-v1")


def test_duplicate_package_ids(tmp_path):
    first = cpt_package(tmp_path, dirname="a")
    second = cpt_package(tmp_path, dirname="b")
    assert_invalid([first, second], "cpt-v1", "package id given twice", str(first), str(second))


def test_same_directory_twice(tmp_path):
    pkg = cpt_package(tmp_path)
    assert_invalid([pkg, pkg], "cpt-v1", "package id given twice")


# ------------------------------------------------------------------ create


def write_lines(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_create_round_trip(tmp_path):
    a = write_lines(tmp_path / "a.jsonl", cpt_records("a", 3))
    b = write_lines(tmp_path / "b.jsonl", cpt_records("b", 2))
    val = write_lines(tmp_path / "val.jsonl", cpt_records("v", 1))
    out = tmp_path / "out" / "cpt-v3"
    code, stdout, err = run_cli("snapshot", "create", "--kind", "cpt", "--package-id", "cpt-v3",
                                "--tokenizer", "qwen2-tok@r3", "--split", f"train={a}",
                                "--split", f"validation={val}", "--split", f"train={b}",
                                "--parent", "cpt-v2", "--created-at", "2026-11-28T00:00:00Z",
                                "--output", out)
    assert (code, err) == (0, "")
    assert stdout == f"created cpt-v3 at {out} (6 records)\n"
    assert (out / "data/train/part-00000.jsonl").read_bytes() == a.read_bytes()
    assert (out / "data/train/part-00001.jsonl").read_bytes() == b.read_bytes()
    assert (out / "data/validation/part-00000.jsonl").read_bytes() == val.read_bytes()
    text = (out / "manifest.json").read_text(encoding="utf-8")
    manifest = json.loads(text)
    assert text == json.dumps(manifest, indent=2) + "\n"
    assert list(manifest) == ["format", "format_version", "package_id", "kind", "created_at",
                              "tokenizer", "lineage", "files"]
    assert manifest["lineage"] == {"parents": ["cpt-v2"], "depends_on": []}
    assert manifest["tokenizer"] == {"name": "qwen2-tok", "revision": "r3"}
    assert [list(f) for f in manifest["files"]] == [
        ["path", "split", "records", "bytes", "sha256"]] * 3
    assert [(f["path"], f["records"]) for f in manifest["files"]] == [
        ("data/train/part-00000.jsonl", 3), ("data/validation/part-00000.jsonl", 1),
        ("data/train/part-00001.jsonl", 2)]
    assert manifest["files"][0]["sha256"] == hashlib.sha256(a.read_bytes()).hexdigest()
    assert run_cli("snapshot", "validate", out)[0] == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["cpt-v3"]


def test_create_sft_with_refs_then_validate_with_target(tmp_path):
    v1 = make_package(tmp_path, "sft-v1", {"train": [sft_record("q1")]}, kind="sft")
    src = write_lines(tmp_path / "v2.jsonl", [
        sft_record("n1"), {"id": "q1", "ref": {"package_id": "sft-v1", "id": "q1"}}])
    out = tmp_path / "sft-v2"
    code, _, err = run_cli("snapshot", "create", "--kind", "sft", "--package-id", "sft-v2",
                           "--split", f"train={src}", "--depends-on", "sft-v1",
                           "--output", out)
    assert (code, err) == (0, "")
    manifest = json.loads((out / "manifest.json").read_text())
    assert "tokenizer" not in manifest
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", manifest["created_at"])
    assert run_cli("snapshot", "validate", out, v1)[0] == 0


def test_create_refuses_existing_output(tmp_path):
    src = write_lines(tmp_path / "a.jsonl", cpt_records())
    out = tmp_path / "exists"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    code, _, err = run_cli("snapshot", "create", "--kind", "cpt", "--package-id", "cpt-v1",
                           "--tokenizer", "t@1", "--split", f"train={src}", "--output", out)
    assert code == 1 and err.count("\n") == 1 and "already exists" in err
    assert tree_bytes(out) == {"keep.txt": b"mine"}


def test_create_bad_line_leaves_nothing(tmp_path):
    src = tmp_path / "a.jsonl"
    src.write_bytes(b'{"id": "a", "text": "fine"}\n{"id": "b", "txt": "typo"}\n')
    out = tmp_path / "out" / "cpt-v1"
    err = assert_refused(["snapshot", "create", "--kind", "cpt", "--package-id", "cpt-v1",
                          "--tokenizer", "t@1", "--split", f"train={src}", "--output", out],
                         "cpt-v1", f"{src}:2:", "missing field 'text'")
    assert "Traceback" not in err
    assert not out.exists()
    assert list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize("args, fragment", [
    (["--kind", "cpt"], "needs --tokenizer NAME@REVISION"),
    (["--kind", "cpt", "--tokenizer", "qwen2-tok"], "must be NAME@REVISION"),
    (["--kind", "cpt", "--tokenizer", "qwen2-tok@"], "must be NAME@REVISION"),
    (["--kind", "sft", "--tokenizer", "a@b"], "--tokenizer is only for cpt packages"),
    (["--kind", "cpt", "--tokenizer", "a@b", "--created-at", "yesterday"], "not an ISO"),
    (["--kind", "cpt", "--tokenizer", "a@b", "--depends-on", "x1"],
     "ref names package 'sft-v1'"),
    (["--kind", "cpt", "--tokenizer", "a@b", "--depends-on", "new"],
     "a package cannot depend on itself"),
])
def test_create_refusals(tmp_path, args, fragment):
    src = write_lines(tmp_path / "a.jsonl", cpt_records() + [
        {"id": "r", "ref": {"package_id": "sft-v1", "id": "q1"}}])
    out = tmp_path / "new"
    assert_refused(["snapshot", "create", "--package-id", "new", *args,
                    "--split", f"train={src}", "--output", out], "new", fragment)
    assert not out.exists()


def test_create_refuses_gzip_input(tmp_path):
    src = tmp_path / "a.jsonl.gz"
    src.write_bytes(gzip.compress(b'{"id": "a", "text": "x"}\n'))
    assert_refused(["snapshot", "create", "--kind", "cpt", "--package-id", "p", "--tokenizer",
                    "a@b", "--split", f"train={src}", "--output", tmp_path / "p"],
                   "p", "gzip-compressed")


def test_create_refuses_missing_and_empty_input(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    for src, fragment in ((tmp_path / "none.jsonl", "no such file"), (empty, "has no records")):
        assert_refused(["snapshot", "create", "--kind", "cpt", "--package-id", "p",
                        "--tokenizer", "a@b", "--split", f"train={src}",
                        "--output", tmp_path / "p"], "p", str(src), fragment)
        assert not (tmp_path / "p").exists()


def _create_argv(src: Path, out: Path, package_id: str = "cpt-v2") -> list:
    return ["snapshot", "create", "--kind", "cpt", "--package-id", package_id, "--tokenizer",
            "qwen2-tok@r3", "--split", f"train={src}", "--output", out]


@pytest.mark.parametrize("inside", ["data/new", "data/train/new", "new", "data/x/y/new"])
def test_create_refuses_an_output_inside_an_existing_package(tmp_path, inside):
    """A folder created inside a package would be an unlisted file of it: that package would
    then fail `snapshot validate`."""
    pkg = cpt_package(tmp_path)
    src = write_lines(tmp_path / "new.jsonl", cpt_records("n", 2))
    before = tree_bytes(pkg)
    line = refused(_create_argv(src, pkg / inside))
    assert f"output {pkg / inside} is inside package {pkg.resolve()}; a package is immutable" \
        in line
    assert tree_bytes(pkg) == before and not (pkg / "data" / "x").exists()
    assert run_cli("snapshot", "validate", pkg)[0] == 0


def test_create_refuses_when_another_run_published_the_output_first(tmp_path, monkeypatch):
    from near_dedup_core.package import create as create_mod

    src = write_lines(tmp_path / "new.jsonl", cpt_records("n", 2))
    out = tmp_path / "out"
    load = create_mod.load_package

    def published_meanwhile(path):
        if not out.exists():  # the other run renames its folder into place first
            (out / "data").mkdir(parents=True)
        return load(path)

    monkeypatch.setattr(create_mod, "load_package", published_meanwhile)
    line = refused(_create_argv(src, out))
    assert line == (f"near-dedup: error: output {out} already exists: another run writing "
                    f"this output published it first; nothing was written by this one")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.jsonl", "out"]
    assert [p.name for p in out.iterdir()] == ["data"]


@pytest.mark.parametrize("item", ["train", "=a.jsonl", "train=", "bad split=a.jsonl"])
def test_malformed_split_argument(tmp_path, item):
    code, _, err = run_cli("snapshot", "create", "--kind", "cpt", "--package-id", "p",
                           "--tokenizer", "a@b", "--split", item, "--output", tmp_path / "p")
    assert code == 1 and err.count("\n") == 1 and "must be SPLIT=FILE" in err


def test_parse_split_args():
    assert pkgmod.parse_split_args(["train=a.jsonl", "validation=dir/v=1.jsonl"]) == [
        ("train", Path("a.jsonl")), ("validation", Path("dir/v=1.jsonl"))]


# ------------------------------------------------------------------ line blocks


def test_blocks_in_shared_memory_are_the_blocks_read_as_bytes(tmp_path, monkeypatch):
    """Blocks cut into `SharedBlocks` slots have the lines, numbers and positions of the
    blocks read as bytes; a line longer than a slot's room comes as bytes, and so does a
    last line without its newline."""
    records = [{"id": f"s{i}", "text": "w" * (i * 37 % 300)} for i in range(200)]
    records[90]["text"] = "long " * 400  # longer than a slot
    pkg = cpt_package(tmp_path, splits={"train": records, "validation": cpt_records("v", 5)},
                      shard_records=120)
    shard = pkg / "data/train/part-00001.jsonl"
    data = shard.read_bytes().rstrip(b"\n")
    shard.write_bytes(data)
    update_manifest(pkg, lambda m: m["files"][1].update(
        bytes=len(data), sha256=hashlib.sha256(data).hexdigest()))
    pkgs = pkgmod.open_packages([pkg])

    def events(shared):
        out = []
        for event in pkgmod.read_blocks(pkgs, block_lines=7, block_bytes=512, shared=shared):
            if isinstance(event, pkgmod.ShardEnd):
                out.append(("end", event.file, event.problem))
                continue
            out.append((event.file, event.first_line, event.first_position, event.line_count,
                        event.shared is not None,
                        [bytes(line) for line in event.lines()]))
            if event.shared is not None:
                shared.release(event.shared[0])
        return out

    shared = pkgmod.SharedBlocks(3, 1024)
    try:
        monkeypatch.setattr(pkgblocks, "_attached", shared.map)
        got = events(shared)
        assert sorted(shared.take() for _ in range(3)) == [0, 1, 2]  # all given back
    finally:
        monkeypatch.setattr(pkgblocks, "_attached", None)
        shared.close()
    plain = events(None)
    assert [e[:4] + e[5:] for e in got] == [e[:4] + e[5:] for e in plain]
    kinds = [e[4] for e in got if e[0] != "end"]
    assert kinds.count(True) > 40 and kinds.count(False) >= 2  # the long line, the last one
