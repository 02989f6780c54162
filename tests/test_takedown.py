"""Takedowns kept in the index (docs/takedowns.md), on every backend: `takedown add`, `lift`,
`list` and `show` record and read an append-only log inside the index, in one transaction of
its writer; bad input and a reused request id change nothing."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from helpers import (
    THRESHOLD,
    cli_ok,
    cpt,
    drop_every,
    index,
    index_bytes,
    index_state,
    jaccard,
    load_report,
    make_package,
    near_copy,
    plain_prose,
    refused,
    reverse_every,
    run_cli,
    scan,
    tree_bytes,
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


# --------------------------------------------------------------------------- scans


@pytest.fixture(scope="module")
def pool(backend, new_index_location, tmp_path_factory):
    """An index holding ``cpt-a`` (plain prose, the first text the one to take down, and a
    short text) then ``cpt-b``: edited copies of that text from a few words changed to
    every fifth word reversed, in train and in validation, and other prose; a report frozen
    before any takedown."""
    folder = tmp_path_factory.mktemp(f"takedown-scan-{backend}")
    prose = plain_prose()
    target, donor, others = prose[10], prose[11], prose[12:18]
    copies = {"copy-near": near_copy(target, donor),
              "copy-drop": drop_every(target, 25),
              **{f"copy-rev{k}": reverse_every(target, k) for k in (40, 20, 12, 8, 5, 3)}}
    short = "Remove this line, please."
    a = make_package(folder, "cpt-a", {"train": [cpt("target", target), cpt("short", short),
                                                 *(cpt(f"a{i}", t) for i, t in enumerate(others[:3]))]})
    b = make_package(folder, "cpt-b", {
        "train": [*(cpt(k, t) for k, t in copies.items()), cpt("short-again", short),
                  *(cpt(f"b{i}", t) for i, t in enumerate(others[3:]))],
        "validation": [cpt("val-copy", copies["copy-rev20"]), cpt("val-other", donor)]})
    location = new_index_location(folder)
    index(location, a)
    index(location, b)
    before = scan(location, [a, b], folder / "before")
    return location, folder, a, b, target, short, copies, before


@pytest.fixture(scope="module")
def after(pool):
    """The report of the pool scanned again once REQ-7 took down ``target`` by its text."""
    location, folder, a, b, target, *_ = pool
    text = folder / "target.txt"
    text.write_text(target)
    cli_ok("--index", location, "takedown", "add", "--request", "REQ-7", "--reason", "opt-out",
           "--text", text)
    return scan(location, [a, b], folder / "after")


def test_a_scan_takes_down_every_copy_the_scan_relates_in_every_split(pool, after):
    location, folder, a, b, target, short, copies, before = pool
    report = after
    assert cli_ok("report", "verify", report.path).startswith(f"report {report.path}: OK")
    assert report.manifest["format_version"] == 2
    down = {d["sample_id"]: d for d in report.decisions if d["reason"] == "takedown"}
    assert all(d["decision"] == "exclude" and d["kept"] is None for d in down.values())
    relations = {r["sample"]["sample_id"]: r for r in report.relations if "takedown" in r}
    assert set(relations) == set(down)
    assert {r["takedown"]["request_id"] for r in relations.values()} == {"REQ-7"}
    # recall equals the scan's: the train copies taken down are exactly those the scan
    # related to the original, with the same Jaccard; the original is taken down itself
    related = {r["sample"]["sample_id"]: r["jaccard"] for r in before.relations
               if r["match"]["sample_id"] == "target" and r["sample"]["package_id"] == "cpt-b"}
    assert related and set(related) < set(copies)
    train_down = {s: relations[s]["jaccard"] for s in down if s not in ("target", "val-copy")}
    assert train_down == related
    assert relations["target"]["jaccard"] == 1.0 and relations["target"]["kind"] == "exact"
    # … and exactly the copies at or above the threshold by exact Jaccard, in validation too
    expected = {k for k, t in copies.items() if jaccard(target, t) >= THRESHOLD}
    assert set(train_down) == expected and expected != set(copies)
    assert jaccard(target, copies["copy-rev20"]) >= THRESHOLD
    assert down["val-copy"]["split"] == "validation"
    # what the takedown left alone is decided as before, the short text included
    kept_before = {d["sample_id"]: d for d in before.decisions}
    for d in report.decisions:
        if d["sample_id"] not in down and d["decision"] == "keep":
            assert kept_before[d["sample_id"]]["decision"] == "keep"
    assert report.manifest["takedowns"] == [{"request_id": "REQ-7", "act": 1, "texts": 1,
                                             "samples": len(down)}]
    assert report.manifest["counts"]["by_reason"]["takedown"] == len(down)
    # the format 2 files parse into their models and dump back to the same bytes
    from near_dedup_core.formats.report import ROW_MODELS, ReportManifest
    from near_dedup_core.fsutil import json_line

    for name, model in ROW_MODELS.items():
        for raw in (report.path / name).read_bytes().splitlines(keepends=True):
            assert json_line(model.model_validate_json(raw).model_dump(mode="json")) == raw
    assert ReportManifest.model_validate_json((report.path / "manifest.json").read_bytes()) \
        .model_dump(mode="json", by_alias=True) == report.manifest
    # report explain names the request, the text and the Jaccard; report diff lists them
    near = next(s for s in train_down if relations[s]["kind"] == "near")
    code, out, err = run_cli("report", "explain", report.path, "cpt-b", near)
    assert code == 0, err
    assert (f"taken down by request REQ-7 (near copy of target.txt, "
            f"J={train_down[near]:.4f})") in out
    explained = json.loads(cli_ok("report", "explain", report.path, "cpt-b", "val-copy",
                                  "--json"))
    assert explained["reason"] == "takedown" and explained["kept"] is None
    assert [r["takedown"] for r in explained["relations"] if "takedown" in r] == [
        {"request_id": "REQ-7", "item": "target.txt"}]
    diff = json.loads(cli_ok("report", "diff", before.path, report.path, "--json"))
    assert diff["takedowns"] == {"old": {}, "new": {"REQ-7": len(down)}, "added": ["REQ-7"],
                                 "gone": []}
    assert {(x["sample_id"], x["new"]["reason"]) for x in diff["newly_excluded"]} >= {
        ("val-copy", "takedown"), ("target", "takedown")}
    assert "takedowns" not in json.loads(cli_ok("report", "diff", before.path, before.path,
                                                "--json"))
    # the reviewer site lists the takedowns applied and explains each sample taken down
    site = folder / "site-after"
    cli_ok("report", "html", report.path, "--output", site)
    overview = (site / "index.html").read_text()
    assert "<h2>Takedowns</h2>" in overview
    assert (f'<tr><td>REQ-7</td><td class="n">1</td><td class="n">1</td>'
            f'<td class="n">{len(down)}</td></tr>') in overview
    searchable = "".join(p.read_text() for p in sorted((site / "data").rglob("*.js")))
    assert "Excluded: taken down by request REQ-7 (near copy of target.txt" in searchable
    assert '"takedown":{"request_id":"REQ-7","item":"target.txt"}' in searchable

    # a short text (under min_chars) is taken down where it is exactly the same text
    lines = folder / "short.jsonl"
    lines.write_text(json.dumps({"id": "s", "text": "  remove THIS line, please. "}) + "\n")
    cli_ok("--index", location, "takedown", "add", "--request", "REQ-8", "--reason", "pii",
           "--jsonl", lines)
    both = scan(location, [a, b], folder / "both")
    short_down = {d["sample_id"] for d in both.decisions if d["reason"] == "takedown"} - set(down)
    assert short_down == {"short", "short-again"}
    assert cli_ok("report", "verify", both.path)

    # lifted, the takedowns no longer apply: the report is the one before, byte for byte
    cli_ok("--index", location, "takedown", "lift", "REQ-7", "--reason", "withdrawn")
    cli_ok("--index", location, "takedown", "lift", "REQ-8", "--reason", "withdrawn")
    lifted = scan(location, [a, b], folder / "lifted")
    assert tree_bytes(lifted.path) == tree_bytes(before.path)
    assert before.manifest["format_version"] == 1 and "takedowns" not in before.manifest


def test_report_verify_refuses_a_takedown_turned_into_a_keep(after, tmp_path):
    report = after.path
    copy = tmp_path / "r"
    shutil.copytree(report, copy)
    lines = (copy / "decisions.jsonl").read_text().splitlines(keepends=True)
    k = next(i for i, line in enumerate(lines) if '"reason":"takedown"' in line)
    row = json.loads(lines[k])
    row.update(decision="keep", reason="unique", jaccard=None)
    lines[k] = json.dumps(row, sort_keys=True, separators=(",", ":")) + "\n"
    (copy / "decisions.jsonl").write_text("".join(lines))
    sums = "".join(f"{hashlib.sha256((copy / n).read_bytes()).hexdigest()}  {n}\n"
                   for n in sorted(p.name for p in copy.iterdir() if p.name != "checksums.sha256"))
    (copy / "checksums.sha256").write_text(sums)
    refused(["report", "verify", copy], "relations.jsonl gives exclude (takedown)")


def test_the_mixture_drops_taken_down_samples_and_verify_proves_none_remain(pool, after,
                                                                           tmp_path):
    from near_dedup_core.fsutil import json_line, write_checksums, write_json
    from near_dedup_core.index_store import open_index

    location, folder, a, b, target, *_ = pool
    report = after.path
    down = {d["sample_id"]: d for d in load_report(report).decisions
            if d["reason"] == "takedown"}
    assert down["val-copy"]["split"] == "validation"
    config = tmp_path / "mix.json"
    config.write_text(json.dumps({
        "name": "mix", "kind": "cpt", "inputs": [str(a), str(b)], "target_records": 6,
        "group_by": "domain", "strategy": {"type": "temperature", "temperature": 1.0},
        "quality": {"min_chars": 0}, "allow_shortfall": True, "redistribute": True, "seed": 7,
        "near_dedup_report": str(report)}))
    built = tmp_path / "mixture"
    cli_ok("mixture", "build", config, "--output", built)
    verified = cli_ok("mixture", "verify", built)
    assert verified.startswith(f"mixture {built} OK")
    assert f"none of its {len(down)} samples taken down remains" in verified
    records = [json.loads(line) for p in sorted(built.glob("data/*/part-00000.jsonl"))
               for line in p.read_text().splitlines()]
    ids = {r["origin"]["sample_id"] for r in records}
    assert ids and not ids & set(down)
    assert "val-other" in ids  # the rest of the retained split is copied whole

    # takedown check compares built mixtures with the takedowns in force now: a mixture of
    # the report before the takedown holds the text, one of the report after does not
    stale_config = tmp_path / "stale.json"
    stale_config.write_text(config.read_text().replace(str(report), str(folder / "before")))
    stale = tmp_path / "stale"
    cli_ok("mixture", "build", stale_config, "--output", stale)
    text = folder / "again.txt"
    text.write_text(target)
    # REQ-9 the one takedown in force: the scan's test lifts REQ-7 at its end, if it ran
    listed = cli_ok("--index", location, "takedown", "list").splitlines()
    if any(line.startswith("REQ-7\tin ") for line in listed):
        cli_ok("--index", location, "takedown", "lift", "REQ-7", "--reason", "withdrawn")
    cli_ok("--index", location, "takedown", "add", "--request", "REQ-9", "--reason", "again",
           "--text", text)
    assert cli_ok("--index", location, "takedown", "check", built) == (
        f"mixture {built}: no taken-down content ({len(records)} records against 1 takedown "
        f"in force in index {open_index(location).label})\n")
    line = refused(["--index", location, "takedown", "check", stale],
                   f"mixture {stale}: data/", "is taken down by request REQ-9 (copy of again.txt")
    assert "cpt-a/target" in line or "cpt-b/copy-" in line or "cpt-b/val-copy" in line

    # a taken-down sample put back, with every checksum and count made to agree: refused
    val = built / "data/validation/part-00000.jsonl"
    text = next(r for r in (json.loads(line) for line in
                            (b / "data/validation/part-00000.jsonl").read_text().splitlines())
                if r["id"] == "val-copy")
    val.write_bytes(json_line(text | {"origin": {"package_id": "cpt-b", "sample_id": "val-copy"}})
                    + val.read_bytes())  # in its place: before val-other
    manifest = json.loads((built / "manifest.json").read_text())
    for f in manifest["files"]:
        f["sha256"] = hashlib.sha256((built / f["path"]).read_bytes()).hexdigest()
        f["records"] += f["split"] == "validation"
    manifest["counts"]["retained"] += 1
    manifest["counts"]["by_split"]["validation"] += 1
    write_json(built / "manifest.json", manifest)
    plan = json.loads((built / "plan.json").read_text())
    plan["retained_records"]["validation"] += 1
    write_json(built / "plan.json", plan)
    (built / "checksums.sha256").unlink()
    write_checksums(built)
    refused(["mixture", "verify", built], "cpt-b/val-copy was taken down")


def test_an_sft_takedown_applies_whatever_the_scope_and_to_refs(tmp_path):
    """SFT: the QA text (``role: content`` lines) is compared whatever the sample's scope
    (task, system, material): messages given alone take the sample down; a sample of a
    later package that refers to a taken-down sample is taken down too."""
    from helpers import SAMPLES

    location = tmp_path / "sft.sqlite"
    v1, v2 = SAMPLES / "sft" / "sft-v1", SAMPLES / "sft" / "sft-v2"
    index(location, v1)
    index(location, v1, v2)
    refs = [json.loads(line) for line in (v2 / "data/train/part-00000.jsonl").read_text()
            .splitlines()]
    ref = next(r for r in refs if "ref" in r)
    target = ref["ref"]["id"]
    refused(["--index", location, "takedown", "add", "--request", "S-0", "--reason", "x",
             "--package", v2, "--sample", ref["id"]], f"refers to sample {target}")
    cli_ok("--index", location, "takedown", "add", "--request", "S-1", "--reason", "opt-out",
           "--package", v1, "--sample", target)
    other = next(r for r in (json.loads(line) for line in
                             (v1 / "data/train/part-00000.jsonl").read_text().splitlines())
                 if r["id"] != target)
    lines = tmp_path / "messages.jsonl"
    lines.write_text(json.dumps({"id": "m", "messages": other["messages"]}) + "\n")
    cli_ok("--index", location, "takedown", "add", "--request", "S-2", "--reason", "opt-out",
           "--jsonl", lines)
    report = scan(location, [v1, v2], tmp_path / "report")
    down = {(d["package_id"], d["sample_id"]) for d in report.decisions
            if d["reason"] == "takedown"}
    assert {("sft-v1", target), ("sft-v2", ref["id"]), ("sft-v1", other["id"])} <= down
    assert cli_ok("report", "verify", report.path)
