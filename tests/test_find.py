"""`near-dedup index find` on every backend (`backend`, tests/conftest.py): the same index,
built from real prose with an exact copy, a near copy, a copy whose numbers differ, a short
text and a second tokenizer, answers every kind of query (a text file, JSONL lines, a
package's samples, hashes) with the same bytes on SQLite, PostgreSQL and Iceberg, inline, on
a local pool and on Ray; its near copies are the scan's relations; bad input is one line."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    REPO,
    cpt,
    make_package,
    read_jsonl,
    refused,
    run_cli,
    scan,
    stdlib_paragraphs,
)

from near_dedup_core.compare import content_id, cpt_scope
from near_dedup_core.history import find as find_module
from near_dedup_core.ingest import run as ingest_run
from near_dedup_core.normalize import normalize
from near_dedup_core.scan import verify as verify_stage

TOKENIZER = {"name": "qwen2-tok", "revision": "r3"}
OTHER = {"name": "other-tok", "revision": "r1"}
DATES = ("2026-11-25T06:00:00Z", "2026-11-26T06:00:00Z")
#: What the first backend answered, per query set, for the others to equal byte for byte.
EXPECTED: dict[str, str] = {}


def cid(text: str, tokenizer: dict = TOKENIZER) -> str:
    return content_id(cpt_scope(tokenizer).key, normalize(text)).hex()


@pytest.fixture(scope="module")
def built(backend, new_index_location, tmp_path_factory):
    """Two batches: ``cpt-a`` (batch 1), then ``cpt-b`` and ``cpt-c`` (batch 2, ``cpt-c``
    of another tokenizer), each at a fixed date; and the queries' files."""
    folder = tmp_path_factory.mktemp(f"find-{backend}")
    prose = stdlib_paragraphs()
    flood = prose[2] + " The river rose by 3 metres in 2 days."
    texts = {"a0": prose[0], "a1": prose[1], "a2": flood, "v0": prose[4],
             "b0": prose[0], "b1": prose[1].replace(" the ", " a ", 1),
             "b2": flood.replace("by 3 metres", "by 4 metres"), "b3": "A short text.",
             "b4": prose[3], "c0": prose[0]}
    a = make_package(folder, "cpt-a", {"train": [cpt(s, texts[s]) for s in ("a0", "a1", "a2")],
                                       "validation": [cpt("v0", texts["v0"])]})
    b = make_package(folder, "cpt-b", {"train": [cpt(s, texts[s])
                                                 for s in ("b0", "b1", "b2", "b3", "b4")]})
    c = make_package(folder, "cpt-c", {"train": [cpt("c0", texts["c0"])]},
                     tokenizer="other-tok@r1")
    location = new_index_location(folder)
    with pytest.MonkeyPatch.context() as mp:
        for date, packages in zip(DATES, ((a,), (b, c)), strict=True):
            mp.setattr(ingest_run, "utc_now", lambda date=date: date)
            code, _, err = run_cli("--quiet", "--index", location, "index", "--inputs",
                                   *packages, "--workers", 1)
            assert code == 0, err
    q1 = folder / "q1.txt"  # a1 in other case and spacing: the same normalized text
    q1.write_text("  " + prose[1].upper().replace(" ", "   ") + "\n", encoding="utf-8")
    lines = folder / "q.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in [
        {"id": "short", "text": "a SHORT   text."},
        {"id": "unrelated", "text": prose[10]},
        {"id": "flood", "text": flood, "domain": "news"},
        {"id": "chat", "task": "qa", "messages": [{"role": "user", "content": prose[0]}]},
    ]), encoding="utf-8")
    return location, folder, texts, (a, b, c), q1, lines


def find(location: str, *args: object) -> list[dict]:
    code, out, err = run_cli("--quiet", "--index", location, "index", "find", "--json", *args)
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


def matches(answer: dict) -> dict[str, dict]:
    return {m["content_id"]: m for m in answer["matches"]}


def where(match: dict) -> list[tuple]:
    return [(s["package_id"], s["sample_id"], s["split"], s["batch"], s["batch_date"])
            for s in match["sources"]]


def test_texts_and_lines(built):
    location, _, texts, _, q1, lines = built
    text, short, unrelated, flood, chat = find(location, "--text", q1, "--jsonl", lines,
                                               "--workers", 1)
    assert text["query"] == {"id": str(q1), "from": "text", "kind": "cpt",
                             "normalized_chars": len(normalize(texts["a1"]))}
    got = matches(text)
    assert list(got) == [cid(texts["a1"]), cid(texts["b1"])]  # the same text first
    same, near = got[cid(texts["a1"])], got[cid(texts["b1"])]
    assert (same["kind"], same["jaccard"], same["blocked_by"]) == ("exact", 1.0, None)
    assert where(same) == [("cpt-a", "a1", "train", 1, DATES[0])]
    assert near["kind"] == "near" and 0.9 <= near["jaccard"] < 1.0
    assert where(near) == [("cpt-b", "b1", "train", 2, DATES[1])]
    assert near["scope"] == "tokenizer:qwen2-tok@r3" and near["first_batch"] == 2
    # a short text matches exactly only, after normalization
    assert [(m["content_id"], m["kind"]) for m in short["matches"]] == \
        [(cid(texts["b3"]), "exact")]
    assert unrelated["matches"] == []
    # the guard's verdict is shown, not applied: the copy whose number differs is listed
    got = matches(flood)
    assert got[cid(texts["a2"])]["kind"] == "exact"
    assert got[cid(texts["b2"])]["blocked_by"] == "numbers"
    # an SFT text is compared within its own scope: the CPT index holds none of it
    assert chat["query"]["kind"] == "sft" and chat["matches"] == []


def test_samples_and_hashes_in_every_tokenizer(built):
    location, _, texts, (_, b, _), _, _ = built
    b0, b4 = find(location, "--package", b, "--sample", "b0", "b4", "--workers", 1)
    assert b0["query"]["id"] == "cpt-b/b0"
    got = matches(b0)
    assert set(got) == {cid(texts["a0"]), cid(texts["c0"], OTHER)}  # a CPT text: every tokenizer
    assert where(got[cid(texts["a0"])]) == [("cpt-a", "a0", "train", 1, DATES[0]),
                                            ("cpt-b", "b0", "train", 2, DATES[1])]
    assert got[cid(texts["c0"], OTHER)]["scope"] == "tokenizer:other-tok@r1"
    assert list(matches(b4)) == [cid(texts["b4"])]
    sha = hashlib.sha256(texts["a1"].encode()).hexdigest()
    by_id, by_sha, unknown = find(location, "--hash", cid(texts["a1"]), sha, "0" * 64,
                                  "--workers", 1)
    assert by_id["matches"] == by_sha["matches"]
    assert list(matches(by_id)) == [cid(texts["a1"]), cid(texts["b1"])]
    assert by_id["query"] == {"id": cid(texts["a1"]), "from": "hash", "kind": "cpt",
                              "normalized_chars": len(normalize(texts["a1"]))}
    assert unknown["query"]["kind"] is None and unknown["matches"] == []


def test_an_answer_shows_columns_read_already(built, monkeypatch):
    """What an answer shows of a content (its id, scope and first batch) comes from the
    columns find has read already (its queries' own contents, those sharing a band key with
    one) where they hold it: only the others are read again, and it is what reading them all
    gives."""
    from near_dedup_core.index_store import open_index

    with open_index(built[0]).snapshot() as snap:
        last = snap.counts().contents
        ids = sorted({s.content for s in snap.content_sources(list(range(1, last + 1)))})
        assert len(ids) >= 8
        everything = snap.content_columns(np.asarray(ids))
        labels = snap.scope_labels()
        expected = {c: (cid.hex(), labels[scope], batch) for c, cid, scope, batch in zip(
            everything.rowid.tolist(), everything.content_id, everything.scope.tolist(),
            everything.batch.tolist(), strict=True)}
        read = [snap.content_columns(np.asarray(ids[1:4])),
                snap.content_columns(np.asarray(ids[3:6]))]
        asked = []
        content_columns = type(snap).content_columns

        def spy(self, wanted):
            asked.append(wanted.tolist())
            return content_columns(self, wanted)

        monkeypatch.setattr(type(snap), "content_columns", spy)
        assert find_module._shown(snap, ids, read) == expected
        assert asked == [[ids[0], *ids[6:]]]
        assert find_module._shown(snap, ids[1:6], read) == {c: expected[c] for c in ids[1:6]}
        assert asked == [[ids[0], *ids[6:]]]


def test_near_copies_are_the_scans_relations(built, tmp_path):
    """Every relation the scan of ``cpt-b`` finds with the history is a match of ``find``
    for that sample, with the same Jaccard and verdict (the same bands, filters and
    verification)."""
    location, _, _, (_, b, _), _, _ = built
    report = scan(location, [b], tmp_path / "report")
    history = [r for r in report.relations if r["history_only"]]
    assert {r["sample"]["sample_id"] for r in history} == {"b0", "b1", "b2"}
    answers = find(location, "--package", b, "--sample", *sorted({
        r["sample"]["sample_id"] for r in history}), "--workers", 1)
    by_sample = {a["query"]["id"].split("/")[1]: matches(a) for a in answers}
    for r in history:
        m = by_sample[r["sample"]["sample_id"]][r["match"]["content_id"]]
        assert (m["jaccard"], m["blocked_by"], m["kind"]) == \
            (r["jaccard"], r["blocked_by"], r["kind"])


QUERY_SETS = {
    "texts": lambda q1, lines, b: ("--text", q1, "--jsonl", lines),
    "samples": lambda q1, lines, b: ("--package", b, "--sample", "b0", "b1", "b2", "b3"),
}


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("name", sorted(QUERY_SETS))
def test_the_same_bytes_everywhere(built, name, workers, monkeypatch):
    """The same answer, byte for byte, on every backend and with any number of workers
    (the table too); with two, the queries are signed one per chunk, shared by the main
    process and a local pool, which verifies chunks of one pair (up to four, to keep a
    connected component of the pairs whole)."""
    if workers > 1:
        monkeypatch.setattr(find_module, "POOL_RECORDS", 0)
        monkeypatch.setattr(verify_stage, "VERIFY_CHUNK", 1)
        monkeypatch.setattr(verify_stage, "MIN_VERIFY_CHUNK", 1)
        monkeypatch.setattr(find_module, "SIGN_CHUNK", 1)
    location, folder, _, (_, b, _), q1, lines = built
    args = QUERY_SETS[name](q1.relative_to(folder), lines.relative_to(folder), b)
    for form in ("--json", None):
        code, out, err = _run_in(folder, location, form, args, workers)
        assert code == 0, err
        assert EXPECTED.setdefault(f"{name} {form}", out) == out


def _run_in(folder: Path, location: str, form: str | None, args: tuple, workers: int
            ) -> tuple[int, str, str]:
    """Run ``index find`` in ``folder`` (so that the query files' names are the same on
    every backend)."""
    import os

    here = Path.cwd()
    os.chdir(folder)
    try:
        return run_cli("--quiet", "--index", location, "index", "find",
                       *((form,) if form else ()), *args, "--workers", workers)
    finally:
        os.chdir(here)


# the queries are read before the index is opened
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True, scope="module")
def test_bad_input_is_one_line(built, backend, tmp_path):
    location, _, _, (_, b, _), q1, _ = built
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x", "text": "fine"}\n{"id": "y"}\n', encoding="utf-8")
    refused(["--index", location, "index", "find", "--jsonl", bad], f"{bad}:2",
            "missing field 'text'")
    bad.write_text('{"id": "x", "text": "fine"}\n\n', encoding="utf-8")
    refused(["--index", location, "index", "find", "--jsonl", bad], f"{bad}:2", "empty line")
    bad.write_text('{"id": "x", "text": "a"}\n{"id": "x", "text": "b"}\n', encoding="utf-8")
    refused(["--index", location, "index", "find", "--jsonl", bad], f"{bad}:2", "duplicate")
    bad.write_bytes(b"\xff\xfe")
    refused(["--index", location, "index", "find", "--text", bad], str(bad), "not UTF-8")
    refused(["--index", location, "index", "find", "--text", tmp_path / "none.txt"],
            "none.txt", "not found")
    refused(["--index", location, "index", "find", "--package", b, "--sample", "zz"],
            "package cpt-b", "no sample zz")
    refused(["--index", location, "index", "find", "--hash", "abc"], "--hash abc",
            "32 hex digits")
    refused(["--index", location, "index", "find"], "usage: index find needs")
    refused(["--index", location, "index", "find", "--sample", "b0"], "--package DIR")
    refused(["--index", tmp_path / "missing.sqlite", "index", "find", "--text", q1],
            "missing.sqlite", "not found")


def test_the_lines_of_a_jsonl_file(tmp_path):
    """Each line is one query, its end ``\\n`` or the end of the file; an empty line is
    one too (refused), a final ``\\n`` starts none, a ``\\r`` before it is JSON's space."""
    from near_dedup_core.errors import NearDedupError
    from near_dedup_core.history.queries import jsonl_queries

    path = tmp_path / "q.jsonl"
    for data, ids in ((b'{"id": "a", "text": "x"}', ["a"]),
                      (b'{"id": "a", "text": "x"}\r\n{"id": "b", "text": "y\\n"}\n', ["a", "b"]),
                      (b'{"id": "a", "text": "\xc3\xa9"}\n{"id": "b", "text": "z"}', ["a", "b"])):
        path.write_bytes(data)
        assert [q.id for q in jsonl_queries(path)] == ids
    assert [q.text for q in jsonl_queries(path)] == ["\u00e9", "z"]
    for data, problem in ((b"", "no query"), (b"\n", ":1: empty line"),
                          (b'{"id": "a", "text": "x"}\n\n{"id": "b", "text": "y"}\n', ":2: empty line"),
                          (b'{"id": "a", "text": "x"}\n\n', ":2: empty line")):
        path.write_bytes(data)
        with pytest.raises(NearDedupError, match=problem):
            jsonl_queries(path)


# the same bytes as on SQLite (test_the_same_bytes_everywhere)
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True, scope="module")
def test_table(built, backend):
    location, _, texts, _, q1, lines = built
    code, out, err = run_cli("--quiet", "--index", location, "index", "find", "--text", q1,
                             "--jsonl", lines, "--workers", 1)
    assert code == 0, err
    assert f"query {q1} (text, cpt, {len(normalize(texts['a1'])):,} normalized characters): " \
           "2 matches" in out
    assert f"exact J=1.0000  content {cid(texts['a1'])}  tokenizer:qwen2-tok@r3" in out
    assert f"cpt-b b1 (train), batch 2 of {DATES[1]}" in out
    assert "the guard keeps it apart (numbers differ)" in out
    assert "query unrelated (jsonl, cpt, " in out and "): no match" in out



@pytest.mark.slow
# the namespace's loopback does not reach the test's PostgreSQL server
@pytest.mark.parametrize("backend", ["sqlite", "iceberg"], indirect=True, scope="module")
def test_on_ray_the_same_bytes(built, backend):
    """``--executor ray`` (a local Ray started for the run, in a private network namespace
    holding only the loopback interface where ``unshare`` is available, as in test_ray.py):
    the verify tasks are shipped their texts and, on Iceberg, the per-bucket join runs as Ray
    tasks; the answer is the local one, byte for byte."""
    pytest.importorskip("ray", reason="pip install 'near-dedup[ray]'")
    location, _, _, (_, b, _), _, _ = built
    args = ["--quiet", "--index", location, "index", "find", "--json", "--package", str(b),
            "--sample", "b0", "b1", "b2", "b3", "--executor", "ray", "--workers", "2"]
    cmd = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "near_dedup_core", *args])
    if os.geteuid() == 0 and shutil.which("unshare") and shutil.which("ip"):
        argv = ["unshare", "-n", "sh", "-c", f"ip link set lo up && exec {cmd}"]
    else:
        argv = ["sh", "-c", f"exec {cmd}"]
    run = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 0, run.stderr[-3000:]
    local = find(location, "--package", b, "--sample", "b0", "b1", "b2", "b3", "--workers", 1)
    assert run.stdout == "".join(json.dumps(a, separators=(",", ":"), ensure_ascii=False)
                                 + "\n" for a in local)
    assert run.stdout == EXPECTED.get("samples --json", run.stdout)


def _mixture(folder: Path, name: str, inputs: list[Path], report: Path | None,
             target: int) -> Path:
    config = folder / f"{name}.json"
    config.write_text(json.dumps({
        "name": name, "kind": "cpt", "inputs": [str(p) for p in inputs],
        **({"near_dedup_report": str(report)} if report else {}), "target_records": target,
        "group_by": "domain", "strategy": {"type": "temperature", "temperature": 2.0},
        "quality": {"min_chars": 0}, "allow_shortfall": False, "redistribute": True,
        "seed": 7}), encoding="utf-8")
    out = folder / name
    code, _, err = run_cli("--quiet", "mixture", "build", config, "--output", out)
    assert code == 0, err
    return out


def _held(mixture: Path) -> set[tuple[str, str]]:
    """(package, sample) of every record of a mixture's data files."""
    return {(r["origin"]["package_id"], r["origin"]["sample_id"])
            for path in sorted((mixture / "data").rglob("*.jsonl")) for r in read_jsonl(path)}


# the mixtures are read from their own files, whatever the index
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True, scope="module")
def test_which_shipped_mixtures_held_each_source(built, backend, tmp_path):
    """``--mixtures``: per source, the mixtures (as given) whose frozen files hold that
    sample; a copy the report excluded is in none; a mixture whose data file changed is
    one line."""
    location, _, texts, (a, b, _), _, _ = built
    report = scan(location, [a, b], tmp_path / "report").path
    deduped = _mixture(tmp_path, "mix-deduped", [a, b], report, 5)
    plain = _mixture(tmp_path, "mix-plain", [a], None, 2)
    held = {m: _held(m) for m in (deduped, plain)}
    assert ("cpt-b", "b0") not in held[deduped]  # the exact copy of a0, excluded
    answers = find(location, "--package", b, "--sample", "b0", "b1", "b2", "b4",
                   "--mixtures", deduped, plain, "--workers", 1)
    seen = 0
    for answer in answers:
        for m in answer["matches"]:
            for s in m["sources"]:
                key = (s["package_id"], s["sample_id"])
                assert s["mixtures"] == [str(x) for x in (deduped, plain) if key in held[x]]
                seen += bool(s["mixtures"])
    assert seen >= 2
    b0 = matches(answers[0])[cid(texts["a0"])]["sources"]
    assert [s["mixtures"] for s in b0 if s["sample_id"] == "b0"] == [[]]
    # the folder holding them (as the release's mixture root): each of its mixtures
    root = find(location, "--package", b, "--sample", "b0", "b1", "b2", "b4",
                "--mixtures", tmp_path, "--workers", 1)
    assert root == answers  # its mixtures in name order: mix-deduped, mix-plain
    empty = tmp_path / "empty"
    empty.mkdir()
    refused(["--index", location, "index", "find", "--package", b, "--sample", "b0",
             "--mixtures", empty], str(empty), "neither a mixture nor a folder of mixtures")
    without = find(location, "--package", b, "--sample", "b0", "--workers", 1)
    assert all(s["mixtures"] is None for m in without[0]["matches"] for s in m["sources"])
    data = next((deduped / "data").rglob("*.jsonl"))
    data.write_bytes(data.read_bytes().replace(b'"text":"', b'"text":"x', 1))
    refused(["--index", location, "index", "find", "--package", b, "--sample", "b0",
             "--mixtures", deduped], f"mixture {deduped}", "does not match the sha256")


def bench_find(*args: object) -> None:
    """``python -m bench.find --queries 20 --workers 1 args…`` from the checkout; it must
    succeed."""
    run = subprocess.run([sys.executable, "-m", "bench.find", "--queries", "20", "--workers",
                          "1", *map(str, args)],
                         cwd=REPO, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 0, run.stderr[-3000:]


# the benchmark's index is a SQLite file
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True, scope="module")
def test_the_benchmark_runs(backend, tmp_path):
    """`bench.find` (docs/measurements/2026-12-06-find.md) on the sample packages: the find
    and the scan of the same texts, each round measured, and the answers counted."""
    samples = REPO / "samples" / "cpt"
    work = tmp_path / "find"
    bench_find("--rounds", 2, "--pool", samples / "2026-11-25" / "cpt-v1",
               "--day", samples / "2026-11-26" / "cpt-v2", "--work", work)
    result = json.loads((work / "find.json").read_text(encoding="utf-8"))
    assert [len(result["rounds"][c]) for c in ("find", "scan")] == [2, 2]
    assert result["queries"] == 20 and result["find_over_scan_cpu"] > 0
    assert result["queries_with_a_history_match"] > 0  # cpt-v2 repeats cpt-v1's texts


# the benchmark's index is a SQLite file
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True, scope="module")
def test_the_benchmark_compares_two_checkouts(backend, tmp_path):
    """`bench.find --a CHECKOUT` runs that checkout's `index find` too, in turns with this
    code's find and the scan (here the same code on both sides, whose answers agree); each
    round records the command's own CPU beside its process tree's."""
    samples = REPO / "samples" / "cpt"
    work = tmp_path / "find"
    bench_find("--rounds", 2, "--pool", samples / "2026-11-25" / "cpt-v1",
               "--day", samples / "2026-11-26" / "cpt-v2", "--work", work, "--a", REPO)
    result = json.loads((work / "find.json").read_text(encoding="utf-8"))
    assert [len(result["rounds"][c]) for c in ("find_a", "find", "scan")] == [2, 2, 2]
    assert result["find_a_over_scan_cpu"] > 0 and result["find_over_find_a_cpu"] > 0
    assert all(0 < r["main_cpu_s"] <= r["cpu_s"] for rs in result["rounds"].values()
               for r in rs)


# the benchmark's index is a SQLite file
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True, scope="module")
def test_the_benchmark_copies_a_history_index(backend, tmp_path):
    """`bench.find --history` copies an index of the pool instead of indexing ``--pool``:
    the copy holds the history's package and the queries' batch, the index given is left as
    it was."""
    import sqlite3

    samples = REPO / "samples" / "cpt"
    history = tmp_path / "pool.sqlite"
    code, _, err = run_cli("--quiet", "--index", history, "index", "--inputs",
                           samples / "2026-11-25" / "cpt-v1", "--workers", 1)
    assert code == 0, err
    before = history.read_bytes()
    work = tmp_path / "find"
    bench_find("--rounds", 1, "--pool", samples / "2026-11-27" / "cpt-v3",
               "--day", samples / "2026-11-26" / "cpt-v2", "--history", history,
               "--work", work)
    assert history.read_bytes() == before
    con = sqlite3.connect(work / "index-20.sqlite")
    try:
        packages = sorted(r[0] for r in con.execute("SELECT package_id FROM packages"))
    finally:
        con.close()
    assert packages == ["cpt-v1", "queries-20"]
    result = json.loads((work / "find.json").read_text(encoding="utf-8"))
    assert result["queries_with_a_history_match"] > 0  # cpt-v2 repeats cpt-v1's texts


# the scope rule does not depend on the backend
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True, scope="module")
def test_an_sft_record_is_found_in_its_own_scope_only(backend, tmp_path):
    """An SFT query is compared within its scope (task, system, material, images), as a
    scan compares it: the record as the package carries it is found, the same messages
    under another system prompt are not."""
    sft = REPO / "samples" / "sft" / "sft-v1"
    location = tmp_path / "sft.sqlite"
    code, _, err = run_cli("--quiet", "--index", location, "index", "--inputs", sft,
                           "--workers", 1)
    assert code == 0, err
    record = json.loads((sft / "data" / "train" / "part-00000.jsonl").read_text(
        encoding="utf-8").splitlines()[0])
    lines = tmp_path / "q.jsonl"
    other = {**record, "id": "other-system", "system": "You answer in French."}
    lines.write_text(json.dumps(record) + "\n" + json.dumps(other) + "\n", encoding="utf-8")
    same, moved = find(str(location), "--jsonl", lines, "--workers", 1)
    assert same["query"]["kind"] == "sft"
    exact = [m for m in same["matches"] if m["kind"] == "exact"]
    assert len(exact) == 1 and exact[0]["scope"].startswith("sft:extract_kpi:")
    assert ("sft-v1", record["id"]) in {(s["package_id"], s["sample_id"])
                                        for s in exact[0]["sources"]}
    assert moved["matches"] == []
    by_sample = find(str(location), "--package", sft, "--sample", record["id"], "--workers", 1)
    assert by_sample[0]["matches"] == same["matches"]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True, scope="module")
def test_the_queries_and_answers_are_built_with_rare_collections(built, backend, monkeypatch):
    """Reading the queries and answering them is bulk work (`runtime.PROFILES`): both run
    with the collector threshold of `near_dedup_core.collector`, and the caller's thresholds
    are back after."""
    import gc

    from near_dedup_core import collector
    from near_dedup_core.history import queries as queries_module

    seen = []
    for module, name in ((queries_module, "jsonl_queries"), (find_module, "find_texts")):
        def spy(*args, _inner=getattr(module, name), **kwargs):
            seen.append((_inner.__name__, gc.get_threshold()[0]))
            return _inner(*args, **kwargs)
        monkeypatch.setattr(module, name, spy)
    location, _, _, _, q1, lines = built
    before = gc.get_threshold()
    answers = find(location, "--text", q1, "--jsonl", lines, "--workers", 1)
    assert len(answers) == 5 and gc.get_threshold() == before
    young = collector.YOUNG_THRESHOLD
    assert seen == [("jsonl_queries", young), ("find_texts", young)]
