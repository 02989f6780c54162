"""Takedowns kept in the index (docs/takedowns.md), on every backend: `takedown add`, `lift`,
`list` and `show` record and read an append-only log inside the index, in one transaction of
its writer; bad input and a reused request id change nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import (
    cli_ok,
    cpt,
    index,
    index_bytes,
    index_state,
    make_package,
    plain_prose,
    refused,
)


@pytest.fixture(scope="module")
def indexed(backend, new_index_location, tmp_path_factory) -> tuple[str, Path, list[str]]:
    """An index of the module's backend holding one package of plain prose."""
    folder = tmp_path_factory.mktemp(f"takedown-{backend}")
    prose = list(plain_prose()[:6])
    pkg = make_package(folder, "cpt-a", {"train": [cpt(f"a{i}", t) for i, t in enumerate(prose)]})
    location = new_index_location(folder)
    index(location, pkg)
    return location, pkg, prose


def test_a_takedown_is_recorded_listed_shown_and_lifted(indexed, tmp_path):
    from near_dedup_core.index_store import open_index

    location, pkg, prose = indexed
    label = open_index(location).label  # the location without a password
    before = index_state(location)
    out = cli_ok("--index", location, "takedown", "add", "--request", "REQ-1",
                 "--reason", "copyright claim", "--by", "legal@example.com",
                 "--package", pkg, "--sample", "a0", "a1")
    assert out == f"takedown REQ-1 recorded in index {label} (act 1, 2 texts)\n"
    lines = tmp_path / "texts.jsonl"
    lines.write_text(json.dumps({"id": "leak", "text": prose[2]}) + "\n" + json.dumps(
        {"id": "chat", "messages": [{"role": "user", "content": "hi"},
                                    {"role": "assistant", "content": prose[3]}]}) + "\n")
    cli_ok("--index", location, "takedown", "add", "--request", "REQ-2", "--reason", "leak",
           "--jsonl", lines)
    single = tmp_path / "book.txt"
    single.write_text(prose[4])
    cli_ok("--index", location, "takedown", "add", "--request", "REQ-3", "--reason", "opt-out",
           "--text", single, "--keep-text")
    shown = json.loads(cli_ok("--index", location, "takedown", "show", "REQ-1", "--json"))
    assert shown["state"] == "in force" and shown["lifted"] is None
    assert shown["recorded"]["by"] == "legal@example.com"
    assert shown["recorded"]["reason"] == "copyright claim"
    assert [t["id"] for t in shown["texts"]] == ["cpt-a/a0", "cpt-a/a1"]
    assert all(t["near_copies"] and "text" not in t for t in shown["texts"])
    # the index holds fingerprints, not the texts (unless --keep-text)
    with open_index(location).snapshot() as snap:
        stored = "".join(v for k, v in snap.meta().items() if k.startswith("takedown/"))
    assert prose[0][:60] not in stored and prose[2][:60] not in stored
    assert json.dumps(prose[4])[1:-1] in stored
    kept = json.loads(cli_ok("--index", location, "takedown", "show", "REQ-3", "--json"))
    assert kept["texts"][0]["text"] == prose[4]

    out = cli_ok("--index", location, "takedown", "lift", "REQ-2", "--reason", "withdrawn",
                 "--by", "alice")
    assert out == f"takedown REQ-2 lifted in index {label} (act 4)\n"
    listed = [line.split("\t") for line in
              cli_ok("--index", location, "takedown", "list").splitlines()]
    assert [(r[0], r[1].split(" ")[0], r[2]) for r in listed] == [
        ("REQ-1", "in", "2 texts"), ("REQ-2", "lifted", "2 texts"), ("REQ-3", "in", "1 text")]
    text = cli_ok("--index", location, "takedown", "show", "REQ-2")
    assert "lifted" in text and "by alice (act 4): withdrawn" in text
    # the index's batches and packages are as before, and it checks out
    after = index_state(location)
    assert after["counts"] == before["counts"] and after["packages"] == before["packages"]
    assert sorted(k for k in after["meta"] if k.startswith("takedown/")) == [
        "takedown/000001", "takedown/000002", "takedown/000003", "takedown/000004"]

    # refused, and nothing changes: a reused request id (even lifted), a second lift, an
    # unknown request, a missing sample, a bad JSONL line
    unchanged = index_bytes(location)
    refused(["--index", location, "takedown", "add", "--request", "REQ-2", "--reason", "again",
             "--text", single], "request REQ-2 is recorded already")
    refused(["--index", location, "takedown", "lift", "REQ-2", "--reason", "again"],
            "REQ-2 was lifted already")
    refused(["--index", location, "takedown", "lift", "REQ-9", "--reason", "x"],
            "has no takedown REQ-9")
    refused(["--index", location, "takedown", "show", "REQ-9"], "has no takedown REQ-9")
    refused(["--index", location, "takedown", "add", "--request", "REQ-4", "--reason", "x",
             "--package", pkg, "--sample", "a0", "zz"], "package cpt-a has no sample 'zz'")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "x", "text": "fine"}) + "\n{not json\n")
    refused(["--index", location, "takedown", "add", "--request", "REQ-4", "--reason", "x",
             "--jsonl", bad], f"{bad}:2: not valid JSON")
    refused(["--index", location, "takedown", "add", "--request", "REQ-4", "--reason", "x",
             "--sample", "a0", "--text", single], "--sample goes with --package")
    assert index_bytes(location) == unchanged
    assert cli_ok("--index", location, "index", "check").startswith(f"index {label}: OK")


def test_a_takedown_needs_an_index(tmp_path, backend, new_index_location):
    location = new_index_location(tmp_path)
    text = tmp_path / "t.txt"
    text.write_text("some text to take down, long enough to have a signature of its own. " * 3)
    refused(["--index", location, "takedown", "add", "--request", "R", "--reason", "x",
             "--text", text], "index")
    assert index_bytes(location) is None
