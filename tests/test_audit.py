"""Audit tools: `report explain`, `report diff`, and the release's exclusion-rate check.

Reports are real scans: of the bundled sample days (samples/cpt, samples/sft) and of a
constructed three-version pool of stdlib prose whose near duplicates, guard blocks and
history matches are known by construction. Jaccard values are checked against an
independent computation (sets of character 5-grams of the normalized texts).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dagster as dg
import pytest
from helpers import (
    SAMPLES,
    drop_every,
    make_package,
    refused,
    run_cli,
    stdlib_paragraphs,
    tree_bytes,
)

from near_dedup_core.audit import count_report, explain_sample, rate_problems
from near_dedup_core.audit.textdiff import changed_spans
from near_dedup_core.guard import SYMBOL_UNITS
from near_dedup_core.normalize import normalize

CPT_DAYS = {"2026-11-25": "cpt-v1", "2026-11-26": "cpt-v2", "2026-11-27": "cpt-v3"}
REASONS = ("unique", "exact_duplicate", "near_duplicate", "match_not_kept", "guard_blocked",
           "retained_split")


# --------------------------------------------------------------------------- helpers


def cli_ok(*argv: object) -> tuple[str, str]:
    code, out, err = run_cli("--quiet", *argv)
    assert code == 0, err
    return out, err


def cli_fail(*argv: object) -> str:
    return refused(["--quiet", *argv])


def explain_json(report: Path, package_id: str, sample_id: str) -> tuple[dict, str]:
    out, err = cli_ok("report", "explain", report, package_id, sample_id, "--json")
    return json.loads(out), err


def diff_json(old: Path, new: Path) -> dict:
    out, _ = cli_ok("report", "diff", old, new, "--json")
    return json.loads(out)


def scan(idx: str | Path, packages: list[Path], out: Path, config: Path | None = None,
         batches: bool = False) -> Path:
    """Index ``packages`` (one batch, or with ``batches`` one batch each, in order: that is
    the first-ingest order), then freeze the report of the pool."""
    cfg = ("--config", config) if config else ()
    for batch in ([[p] for p in packages] if batches else [packages]):
        cli_ok("--index", idx, *cfg, "index", "--inputs", *batch, "--workers", 1)
    cli_ok("--index", idx, *cfg, "scan", "--inputs", *packages, "--output", out,
           "--workers", 1)
    return out


def decisions(report: Path) -> dict[tuple[str, str], dict]:
    rows = (json.loads(line) for line in (report / "decisions.jsonl").read_text().splitlines())
    return {(d["package_id"], d["sample_id"]): d for d in rows}


def names(items: list[dict]) -> set[str]:
    return {f"{x['package_id']}/{x['sample_id']}" for x in items}


def char_jaccard(a: str, b: str, k: int = 5) -> float:
    sa = {a[i:i + k] for i in range(len(a) - k + 1)}
    sb = {b[i:i + k] for i in range(len(b) - k + 1)}
    return len(sa & sb) / len(sa | sb)


def apply_spans(a: str, spans: list[dict]) -> str:
    """Rebuild the second text from the first and the diff: proves the spans are complete."""
    out, pos = [], 0
    for s in spans:
        assert a[s["a_start"]:s["a_end"]] == s["a_text"]
        out += [a[pos:s["a_start"]], s["b_text"]]
        pos = s["a_end"]
    return "".join(out) + a[pos:]


# --------------------------------------------------------------------------- sample days


def release_sample_days(index: str | Path, root: Path, days: int = 3) -> dict[str, Path]:
    """The first ``days`` bundled CPT days released one by one into ``index``: each day's
    report."""
    return {day: scan(index, [SAMPLES / "cpt" / day / pid], root / f"near-cpt-{day}",
                      SAMPLES.parent / "config" / "near-dedup.json")
            for day, pid in list(CPT_DAYS.items())[:days]}


@pytest.fixture(scope="module")
def sample_days(tmp_path_factory) -> dict[str, Path]:
    """The bundled CPT days released one by one into one SQLite index."""
    root = tmp_path_factory.mktemp("sample-days")
    return release_sample_days(root / "index.sqlite", root)


def test_the_sample_release_on_every_backend_gives_the_same_reports_and_audits(
        backend, index_location, tmp_path, sample_days):
    """Two bundled days released into an index of each backend: each day's report is
    byte-identical to the SQLite release's, verifies, and `report explain` and `report diff`
    answer as they do on the SQLite reports."""
    days = release_sample_days(index_location, tmp_path, days=2)
    for day, report in days.items():
        assert tree_bytes(report) == tree_bytes(sample_days[day]), day
        out, _ = cli_ok("report", "verify", report)
        assert out.startswith(f"report {report}: OK")
    first, last = days["2026-11-25"], days["2026-11-26"]
    for reason in ("near_duplicate", "guard_blocked"):
        d = first_with(last, reason)
        assert explain_json(last, d["package_id"], d["sample_id"])[0] == \
            explain_json(sample_days["2026-11-26"], d["package_id"], d["sample_id"])[0]
    assert diff_json(first, last) == \
        diff_json(sample_days["2026-11-25"], sample_days["2026-11-26"])


def first_with(report: Path, reason: str) -> dict:
    return next(d for d in decisions(report).values() if d["reason"] == reason)


@pytest.mark.parametrize("reason", REASONS)
def test_explain_each_reason_on_the_sample_release(sample_days, reason):
    report = sample_days["2026-11-27"]
    d = first_with(report, reason)
    e, _ = explain_json(report, d["package_id"], d["sample_id"])
    assert list(e) == ["sample", "decision", "reason", "why", "kept", "jaccard", "relations",
                       "guard", "excluded_because_of_it", "diff"]
    assert (e["decision"], e["reason"], e["jaccard"]) == (d["decision"], reason, d["jaccard"])
    assert e["sample"]["content_id"] == d["content_id"] and e["sample"]["text_available"]
    assert e["sample"]["domain"] in {"web", "news", "books", "code-docs"}
    line = (SAMPLES / "cpt" / "2026-11-27" / "cpt-v3" / e["sample"]["file"]).read_text()\
        .splitlines()[e["sample"]["line"] - 1]
    assert json.loads(line)["id"] == d["sample_id"]
    everything = decisions(report)
    # whoever names this sample as its kept partner is listed, and nobody else
    assert names(e["excluded_because_of_it"]) == {
        f"{k[0]}/{k[1]}" for k, x in everything.items()
        if x["kept"] == {"package_id": d["package_id"], "sample_id": d["sample_id"]}}
    earlier = [r for r in e["relations"] if r["listed_as"] == "sample" and not r["history_only"]]
    if reason in ("exact_duplicate", "near_duplicate"):
        assert e["kept"]["package_id"], e["kept"]["sample_id"] == (d["kept"]["package_id"],
                                                                   d["kept"]["sample_id"])
        partner = everything[(e["kept"]["package_id"], e["kept"]["sample_id"])]
        assert partner["decision"] == "keep" and e["kept"]["file"] and e["kept"]["source"]
        assert any(r["partner"]["sample_id"] == d["kept"]["sample_id"]
                   and r["jaccard"] == d["jaccard"] and r["blocked_by"] is None for r in earlier)
        assert (e["diff"] == []) == (reason == "exact_duplicate")
    else:
        assert e["kept"] is None and e["jaccard"] is None
    if reason == "unique":
        assert earlier == []
    if reason == "match_not_kept":
        assert earlier and all(r["partner_decision"] == "exclude"
                               for r in earlier if r["blocked_by"] is None)
    if reason == "guard_blocked":
        assert earlier and all(r["blocked_by"] for r in earlier)
        assert {g["partner"]["sample_id"] for g in e["guard"]} >= {
            r["partner"]["sample_id"] for r in earlier}
        for g in e["guard"]:
            seqs = g["sequences"]
            assert g["recomputed_blocked_by"] == g["blocked_by"]
            field = g["blocked_by"]
            i = g[f"{field}_differ_at"]
            mine, theirs = seqs["sample"][field], seqs["partner"][field]
            assert mine[:i] == theirs[:i] and mine[i:i + 1] != theirs[i:i + 1]
    if reason == "retained_split":
        assert d["split"] == "validation" and e["decision"] == "keep"


def test_explain_text_diff_rebuilds_the_sample_from_its_kept_partner(sample_days):
    report = sample_days["2026-11-27"]
    d = first_with(report, "near_duplicate")
    e = explain_sample(report, d["package_id"], d["sample_id"])
    assert e.diff and e.texts["partner"] != e.texts["sample"]
    assert apply_spans(e.texts["partner"], e.diff) == e.texts["sample"]
    assert all(s["op"] in ("replace", "delete", "insert") for s in e.diff)
    assert e.jaccard == pytest.approx(char_jaccard(e.texts["partner"], e.texts["sample"]),
                                      abs=1e-3)
    out, _ = cli_ok("report", "explain", report, d["package_id"], d["sample_id"])
    assert "decision  exclude (near_duplicate)" in out
    assert f"kept      {d['kept']['package_id']}/{d['kept']['sample_id']}" in out
    assert "text diff:" in out and ("[-" in out or "{+" in out)
    assert len(out) < 4000, "only the changed spans, not the whole texts"


def test_explain_history_only_relation_of_the_sample_release(sample_days):
    report = sample_days["2026-11-26"]
    rel = next(json.loads(line) for line in (report / "relations.jsonl").read_text()
               .splitlines() if json.loads(line)["history_only"])
    s = rel["sample"]
    e, err = explain_json(report, s["package_id"], s["sample_id"])
    hist = [r for r in e["relations"] if r["history_only"]]
    assert hist and all(r["partner"]["package_id"] is None for r in hist)
    assert any(m["package_id"] == "cpt-v1" for r in hist for m in r["match_sources"])
    assert "history-only partners are not among the report's inputs" in err
    assert all(line.startswith("near-dedup: note: ") for line in err.splitlines())


def test_explain_follows_refs_into_the_referenced_package(tmp_path):
    pool = [SAMPLES / "sft" / "sft-v1", SAMPLES / "sft" / "sft-v2"]
    report = scan(tmp_path / "sft.sqlite", pool, tmp_path / "near-sft")
    refs = [json.loads(line) for p in (pool[1] / "data").rglob("*.jsonl")
            for line in p.read_text().splitlines() if '"ref"' in line]
    rec = next(r for r in refs if "ref" in r)
    e, _ = explain_json(report, "sft-v2", rec["id"])
    assert e["sample"]["text_available"]
    target, _ = explain_json(report, rec["ref"]["package_id"], rec["ref"]["id"])
    assert e["sample"]["content_id"] == target["sample"]["content_id"]
    if e["reason"] == "exact_duplicate":
        assert e["diff"] == []


def test_explain_unknown_package_or_sample_exits_1(sample_days):
    report = sample_days["2026-11-25"]
    assert "no input package 'nope'" in cli_fail("report", "explain", report, "nope", "x")
    assert "has no sample 'x'" in cli_fail("report", "explain", report, "cpt-v1", "x")
    assert "checksums.sha256 is missing" in cli_fail("report", "explain", SAMPLES, "cpt-v1", "x")
    assert "checksums.sha256 is missing" in cli_fail("report", "diff", report, SAMPLES)


def test_explain_without_the_package_still_shows_the_report(tmp_path):
    pkg = tmp_path / "pkgs" / "cpt-v1"
    shutil.copytree(SAMPLES / "cpt" / "2026-11-25" / "cpt-v1", pkg)
    report = scan(tmp_path / "i.sqlite", [pkg], tmp_path / "report")
    d = first_with(report, "near_duplicate")
    before = tree_bytes(report)
    full, _ = explain_json(report, d["package_id"], d["sample_id"])
    pkg.rename(tmp_path / "pkgs" / "moved")
    e, err = explain_json(report, d["package_id"], d["sample_id"])
    notes = err.strip().splitlines()
    assert any("package cpt-v1 is no longer readable" in n for n in notes)
    assert all(n.startswith("near-dedup: note: ") for n in notes)
    assert not e["sample"]["text_available"] and e["diff"] == []
    assert (e["decision"], e["reason"], e["kept"]["sample_id"], e["jaccard"]) == \
        (full["decision"], full["reason"], full["kept"]["sample_id"], full["jaccard"])
    assert e["relations"] == full["relations"]
    (tmp_path / "pkgs" / "moved").rename(pkg)
    (pkg / "manifest.json").write_text((pkg / "manifest.json").read_text() + "\n")
    _, err = explain_json(report, d["package_id"], d["sample_id"])
    assert "has changed since the report was frozen" in err
    assert tree_bytes(report) == before


def test_diff_two_days_of_the_sample_release(sample_days):
    old, new = sample_days["2026-11-25"], sample_days["2026-11-26"]
    diff = diff_json(old, new)
    assert list(diff) == ["config_changed", "newly_excluded", "newly_kept", "changed_kept",
                          "only_old", "only_new", "contents", "counts"]
    assert diff["config_changed"]["changed"] is False
    # every day is a new package: nothing is in both reports
    assert names(diff["only_old"]) == {f"{p}/{s}" for p, s in decisions(old)}
    assert names(diff["only_new"]) == {f"{p}/{s}" for p, s in decisions(new)}
    assert diff["newly_excluded"] == diff["newly_kept"] == diff["changed_kept"] == []
    by_domain = {r["domain"]: r for r in diff["counts"]["by_domain"]}
    assert set(by_domain) == {"web", "news", "books", "code-docs"}
    assert sum(r["new"]["exclude"] for r in by_domain.values()) == \
        sum(d["decision"] == "exclude" for d in decisions(new).values())
    assert diff["counts"]["relations"]["new_history_only"] > 0
    out, _ = cli_ok("report", "diff", old, new, "--limit", 2)
    assert "config unchanged" in out and "only new (73, first 2)" in out


# --------------------------------------------------------------------------- three versions


def plain_paragraphs(n: int) -> list[str]:
    out = [p for p in stdlib_paragraphs()
           if not any(c.isdigit() for c in p) and not any(u in p for u in SYMBOL_UNITS)]
    return out[:n]


@pytest.fixture(scope="module")
def versions(tmp_path_factory) -> dict:
    """Three versions: v2 and v3 re-release v1's paragraph with words dropped (near
    duplicates), v2 changes a number (guard), v3 copies v2's number and drops words."""
    root = tmp_path_factory.mktemp("versions")
    p0, p1, p2, p3 = plain_paragraphs(4)
    stats = "in 2024 the plant shipped 4200 units and kept 12 kg of spares. "
    texts = {"v1/a": p0, "v2/a": drop_every(p0, 40), "v3/a": drop_every(p0, 30),
             "v1/n": stats + p1, "v2/n": stats.replace("4200", "4300") + p1,
             "v3/n": stats.replace("4200", "4300") + drop_every(p1, 35),
             "v1/u": p2, "v3/u": p3}

    def rec(name: str, domain: str) -> dict:
        return {"id": name.split("/")[1], "text": texts[name], "domain": domain,
                "source": {"row": name}}

    v1 = make_package(root, "v1", {"train": [rec("v1/a", "web"), rec("v1/n", "news"),
                                             rec("v1/u", "books")]})
    v2 = make_package(root, "v2", {"train": [rec("v2/a", "web"), rec("v2/n", "news")]},
                      created_at="2026-11-26T00:00:00Z")
    v3 = make_package(root, "v3", {"train": [rec("v3/a", "web"), rec("v3/n", "news"),
                                             rec("v3/u", "books")]},
                      created_at="2026-11-27T00:00:00Z")
    strict = root / "strict.json"
    strict.write_text(json.dumps({"threshold": 0.99}))
    return {"texts": texts, "v": (v1, v2, v3),
            "pool": scan(root / "a.sqlite", [v1, v2, v3], root / "pool", batches=True),
            "strict": scan(root / "b.sqlite", [v1, v2, v3], root / "pool-strict", strict,
                           batches=True),
            "day1": scan(root / "c.sqlite", [v1, v2], root / "day1", batches=True),
            "day2": scan(root / "c.sqlite", [v2, v3], root / "day2")}


def test_bar_explain_names_kept_partner_jaccard_and_guard_sequences(versions):
    t = {k: normalize(v) for k, v in versions["texts"].items()}
    assert 0.9 <= char_jaccard(t["v1/a"], t["v3/a"]) < 0.99
    e, _ = explain_json(versions["pool"], "v3", "a")
    # near duplicate of both v1/a (kept) and v2/a (excluded): the kept one is named
    assert (e["decision"], e["reason"]) == ("exclude", "near_duplicate")
    assert (e["kept"]["package_id"], e["kept"]["sample_id"]) == ("v1", "a")
    assert e["jaccard"] == pytest.approx(char_jaccard(t["v1/a"], t["v3/a"]), abs=1e-3)
    assert {r["partner"]["package_id"] for r in e["relations"]} == {"v1", "v2"}

    e, _ = explain_json(versions["pool"], "v3", "n")
    assert (e["reason"], e["kept"]["package_id"], e["kept"]["sample_id"]) == \
        ("near_duplicate", "v2", "n")
    assert e["jaccard"] == pytest.approx(char_jaccard(t["v2/n"], t["v3/n"]), abs=1e-3)
    [g] = e["guard"]
    assert (g["partner"]["package_id"], g["partner"]["sample_id"], g["blocked_by"]) == \
        ("v1", "n", "numbers")
    assert g["sequences"] == {"sample": {"numbers": ["2024", "4300", "12"], "units": ["kg"]},
                              "partner": {"numbers": ["2024", "4200", "12"], "units": ["kg"]}}
    assert (g["numbers_differ_at"], g["units_differ_at"]) == (1, None)

    e, _ = explain_json(versions["pool"], "v2", "n")
    assert e["reason"] == "guard_blocked" and e["kept"] is None
    assert names(e["excluded_because_of_it"]) == {"v3/n"}
    assert apply_spans(t["v1/n"], e["diff"]) == t["v2/n"]  # diff against the blocked partner
    out, _ = cli_ok("report", "explain", versions["pool"], "v2", "n")
    assert "first difference: numbers[1]: 4300 vs 4200" in out


def test_bar_diff_lists_exactly_the_changed_samples_under_two_configs(versions):
    diff = diff_json(versions["pool"], versions["strict"])
    change = diff["config_changed"]
    assert change["changed"] and change["parameters"] == {"threshold": {"old": 0.9, "new": 0.99}}
    # at 0.99 none of the word-dropped copies is a near duplicate any more
    assert names(diff["newly_kept"]) == {"v2/a", "v3/a", "v3/n"}
    assert diff["newly_excluded"] == diff["changed_kept"] == []
    assert diff["only_old"] == diff["only_new"] == []
    assert [x["old"]["reason"] for x in diff["newly_kept"]] == ["near_duplicate"] * 3
    news = {r["domain"]: r for r in diff["counts"]["by_domain"]}["news"]
    assert (news["newly_kept"], news["old"]["exclude"], news["new"]["exclude"]) == (1, 1, 0)
    assert diff_json(versions["pool"], versions["pool"])["newly_kept"] == []
    out, _ = cli_ok("report", "diff", versions["pool"], versions["strict"], "--limit", 2)
    lines = out.splitlines()
    assert lines[2] == "config CHANGED: decisions may differ for that reason alone"
    assert "  threshold: 0.9 → 0.99" in lines
    assert "newly kept (3, first 2)" in lines
    assert any(line.startswith("  v2/a ") and "near_duplicate v1/a" in line for line in lines)


def test_bar_diff_of_two_days_history_never_excludes(versions):
    """Day 2's pool is [v2, v3] with v1 in the index's history only: v2/a, excluded on day 1
    for v1/a, is kept on day 2; v3's samples are new; v1's are gone."""
    diff = diff_json(versions["day1"], versions["day2"])
    assert names(diff["newly_kept"]) == {"v2/a"}
    assert diff["newly_excluded"] == diff["changed_kept"] == []
    assert names(diff["only_old"]) == {"v1/a", "v1/n", "v1/u"}
    assert names(diff["only_new"]) == {"v3/a", "v3/n", "v3/u"}
    assert diff["counts"]["relations"]["new_history_only"] >= 2
    e, _ = explain_json(versions["day2"], "v2", "a")
    [hist] = [r for r in e["relations"] if r["history_only"]]
    assert hist["match_sources"] == [{"package_id": "v1", "sample_id": "a", "split": "train"}]
    assert e["reason"] == "unique" and e["decision"] == "keep"


def test_changed_spans_bounded_on_long_texts():
    a = " ".join(plain_paragraphs(40))
    b = a[:5000] + "inserted words " + a[5000:20000] + a[20100:]
    spans = [s._asdict() for s in changed_spans(a, b)]
    assert apply_spans(a, spans) == b and len(spans) <= 4


# --------------------------------------------------------------------------- rates + Dagster


def test_rate_rules_on_the_constructed_versions(versions):
    current = count_report(versions["pool"])
    assert current.by_domain["web"].exclude == 2 and current.by_domain["web"].samples == 3
    [p] = [p for p in rate_problems(current, None, 0.5, 0.2) if p.group == "domain"]
    assert (p.name, p.rule) == ("web", "max_exclusion_rate")
    previous = count_report(versions["day1"])
    jumps = [p for p in rate_problems(current, previous, 1.0, 0.2) if p.rule == "max_rate_jump"]
    # news: 0 of 2 → 1 of 3 is a jump of 33 points; web: 1 of 2 → 2 of 3 only 17 points
    assert [(p.name, round(p.previous_rate, 3), round(p.rate, 3)) for p in jumps] == \
        [("news", 0.0, 0.333)]
    assert jumps[0].describe() == ("domain news: exclusion rate 33.3% (1 of 3), up from 0.0% "
                                   "the day before")


def copies_day(root: Path) -> Path:
    """Two days: day 1 ordinary; on day 2 the forum domain is mostly verbatim copies."""
    paras = plain_paragraphs(32)

    def rec(sid: str, text: str, domain: str) -> dict:
        return {"id": sid, "text": text, "domain": domain, "source": {"row": sid}}

    day1 = [rec(f"w{i}", paras[i], "web") for i in range(10)] + \
        [rec(f"f{i}", paras[10 + i], "forum") for i in range(3)]
    day2 = [rec(f"w{i}", paras[13 + i], "web") for i in range(10)] + \
        [rec(f"f{i}", paras[23] if i < 6 else paras[24 + i], "forum") for i in range(8)]
    make_package(root / "2026-11-25", "pkg-1", {"train": day1})
    make_package(root / "2026-11-26", "pkg-2", {"train": day2},
                 created_at="2026-11-26T00:00:00Z")
    return root


def test_exclusion_rate_check_fires_on_a_day_of_copies(tmp_path):
    from test_assets import check_results, executed_steps, metadata, release, settings_for

    from near_dedup_assets.assets import SCAN_REPORT

    snapshots = copies_day(tmp_path / "snapshots")
    with dg.instance_for_test() as instance:
        settings = settings_for(tmp_path / "warn", snapshots)
        assert release("2026-11-25", settings, instance).success
        result = release("2026-11-26", settings, instance)
        check = check_results(result)["exclusion_rates"]
        assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
        assert "domain forum: exclusion rate 62.5% (5 of 8)" in check.description
        assert "up from 0.0% the day before" in check.description
        offending = check.metadata["offending"].value
        assert "forum" in offending and "web" not in offending
        assert result.success and "mixture" in executed_steps(result)  # a warning only
        meta = metadata(result, SCAN_REPORT)
        assert meta["vs_previous_only_new"] == 18 and "forum" in meta["vs_previous"]

        # the same day again, with the check blocking and a looser rate limit
        from near_dedup_assets.assets import RELEASE_ASSETS
        from near_dedup_assets.checks import release_checks

        settings = settings_for(tmp_path / "warn", snapshots, max_exclusion_rate=0.7)
        result = dg.materialize([*RELEASE_ASSETS, *release_checks(rates_blocking=True)],
                                partition_key="2026-11-26", resources={"release": settings},
                                instance=instance, raise_on_error=False)
        check = check_results(result)["exclusion_rates"]
        assert not check.passed and check.severity == dg.AssetCheckSeverity.ERROR
        assert "max_rate_jump" in check.metadata["offending"].value  # 62.5 % < 70 %, jump only
        assert "mixture" not in executed_steps(result)


def test_exclusion_rate_check_stays_green_on_the_demo_days(tmp_path):
    from test_assets import check_results, metadata, release, settings_for

    from near_dedup_assets.assets import SCAN_REPORT

    with dg.instance_for_test() as instance:
        settings = settings_for(tmp_path, SAMPLES / "cpt")
        for n, day in enumerate(CPT_DAYS):
            result = release(day, settings, instance)
            assert result.success
            check = check_results(result)["exclusion_rates"]
            assert check.passed and check.severity == dg.AssetCheckSeverity.WARN
            meta = metadata(result, SCAN_REPORT)
            if n == 0:
                assert meta["previous_day"] == "none: first release day"
            else:
                assert meta["vs_previous_config_changed"] is False
                assert meta["vs_previous_new_history_only"] > 0


def test_rate_settings_are_validated():
    from near_dedup_core.errors import NearDedupError

    from near_dedup_assets.checks import rate_checks_blocking
    from near_dedup_assets.resources import settings_from_env

    s = settings_from_env({"NEAR_DEDUP_MAX_EXCLUSION_RATE": "0.3",
                           "NEAR_DEDUP_MAX_RATE_JUMP": "0.1"})
    assert (s.exclusion_rate_limit, s.rate_jump_limit) == (0.3, 0.1)
    assert rate_checks_blocking({"NEAR_DEDUP_RATE_CHECKS_BLOCKING": "on"}) is True
    with pytest.raises(NearDedupError, match="NEAR_DEDUP_MAX_EXCLUSION_RATE='1.5'"):
        settings_from_env({"NEAR_DEDUP_MAX_EXCLUSION_RATE": "1.5"})
    with pytest.raises(NearDedupError, match="NEAR_DEDUP_RATE_CHECKS_BLOCKING"):
        rate_checks_blocking({"NEAR_DEDUP_RATE_CHECKS_BLOCKING": "maybe"})


def test_explain_guard_uses_the_domain_units_of_the_report_config(tmp_path):
    """A unit token configured for one domain: the explained sequences carry it for that
    domain's pair, as the scan saw it."""
    base = plain_paragraphs(1)[0]
    config = tmp_path / "units.json"
    config.write_text(json.dumps({"extra_units": [{"tokens": ["pts"], "domains": ["sport"]}]}))
    records = [{"id": "a", "text": "they scored 30 pts. " + base, "domain": "sport"},
               {"id": "b", "text": "they scored 30 goals. " + base, "domain": "sport"}]
    pkg = make_package(tmp_path, "p", {"train": records})
    report = scan(tmp_path / "i.sqlite", [pkg], tmp_path / "report", config)
    e, _ = explain_json(report, "p", "b")
    assert e["reason"] == "guard_blocked"
    [g] = e["guard"]
    assert g["sequences"] == {"sample": {"numbers": ["30"], "units": []},
                              "partner": {"numbers": ["30"], "units": ["pts"]}}
    assert (g["blocked_by"], g["units_differ_at"], g["numbers_differ_at"]) == ("units", 0, None)


def test_comparison_with_an_unreadable_previous_report_is_a_note_not_a_failure(versions,
                                                                               tmp_path):
    from near_dedup_core.storage import parse_location

    from near_dedup_assets.audit import comparison_metadata

    broken = tmp_path / "near-cpt-previous"
    shutil.copytree(versions["day1"], broken)
    (broken / "manifest.json").write_text("{")
    meta = comparison_metadata(versions["day2"], parse_location(broken))
    assert "no comparison: report" in meta["vs_previous"].value
    assert meta["previous_day"].value == str(broken)
    meta = comparison_metadata(versions["day2"], parse_location(versions["day1"]))
    assert meta["vs_previous_newly_kept"].value == 1
    assert "web" in meta["vs_previous"].value


# --------------------------------------------------------------------------- untrusted input


def own_sample_report(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the first sample day's package (free to damage) and its report."""
    pkg = tmp_path / "pkgs" / "cpt-v1"
    shutil.copytree(SAMPLES / "cpt" / "2026-11-25" / "cpt-v1", pkg)
    return pkg, scan(tmp_path / "i.sqlite", [pkg], tmp_path / "report")


def edit_lines(path: Path, change) -> None:
    """Rewrite a JSONL file of a report, one edited object per line (canonical JSON)."""
    from near_dedup_core.fsutil import json_line

    rows = [json.loads(line) for line in path.read_text().splitlines()]
    change(rows)
    path.write_bytes(b"".join(json_line(r) for r in rows))


def reseal(report: Path) -> None:
    from near_dedup_core.fsutil import write_checksums

    write_checksums(report)


@pytest.mark.parametrize("outside", ["absolute", "dotdot", "unlisted"])
def test_explain_never_reads_outside_the_input_packages(tmp_path, outside):
    pkg, report = own_sample_report(tmp_path)
    secret = tmp_path / "secret.jsonl"
    secret.write_text(json.dumps({"id": "x", "text": "SECRET PASSPHRASE"}) + "\n")
    d = first_with(report, "near_duplicate")
    origin = next(json.loads(line) for line in (report / "origins.jsonl").read_text()
                  .splitlines() if json.loads(line)["sample_id"] == d["sample_id"])
    if outside == "unlisted":  # every line of the sample's file, so the run stays consistent
        target = "data/train/not-in-the-package.jsonl"
    else:
        target = str(secret) if outside == "absolute" else \
            "../" * (len(pkg.parts) + 2) + str(secret).lstrip("/")

    def retarget(rows: list[dict]) -> None:
        for r in rows:
            if r["file"] == origin["file"]:
                r["file"] = target

    edit_lines(report / "origins.jsonl", retarget)
    reseal(report)
    code, out, err = run_cli("--quiet", "report", "explain", report, d["package_id"],
                             d["sample_id"])
    assert code == 1 and out == "" and "SECRET" not in err, (code, out, err)
    assert len(err.strip().splitlines()) == 1 and err.startswith("near-dedup: error: ")
    if outside == "unlisted":
        assert "not-in-the-package.jsonl' is not a data file of the package" in err
    else:
        assert "origins.jsonl:1: file must be a data file path of a package" in err


def test_explain_and_diff_verify_the_report_first(tmp_path, sample_days):
    _, report = own_sample_report(tmp_path)
    d = first_with(report, "near_duplicate")

    def forge(rows: list[dict]) -> None:
        for r in rows:
            if r["sample_id"] == d["sample_id"]:
                r["jaccard"] = 0.1234

    edit_lines(report / "decisions.jsonl", forge)
    before = tree_bytes(report)
    for argv in (("explain", report, d["package_id"], d["sample_id"]),
                 ("diff", sample_days["2026-11-25"], report), ("diff", report, report)):
        assert "decisions.jsonl does not match its sha256" in cli_fail("report", *argv)
    reseal(report)  # consistent checksums, inconsistent content: still refused
    assert "jaccard must be a number from the threshold" in \
        cli_fail("report", "explain", report, d["package_id"], d["sample_id"])
    assert tree_bytes(report) != before


def test_explain_after_a_same_size_edit_of_a_shard_names_package_and_file(tmp_path):
    pkg, report = own_sample_report(tmp_path)
    d = first_with(report, "near_duplicate")
    shard = next(p for p in sorted((pkg / "data" / "train").glob("*.jsonl")))
    data = shard.read_bytes()
    shard.write_bytes(data.replace(b'"text":', b'"txet":', 1))
    assert len(shard.read_bytes()) == len(data)
    origin_file = shard.relative_to(pkg).as_posix()
    samples_there = [json.loads(line) for line in (report / "origins.jsonl").read_text()
                     .splitlines() if json.loads(line)["file"] == origin_file]
    message = cli_fail("report", "explain", report, "cpt-v1", samples_there[0]["sample_id"])
    assert f"package cpt-v1, {origin_file}: the package no longer matches its manifest.json" \
        in message
    assert "KeyError" not in message
    # a sample whose texts are all in other shards is still explained
    others = [json.loads(line) for line in (report / "origins.jsonl").read_text().splitlines()]
    if d["kept"] and all(o["file"] != origin_file for o in others
                         if o["sample_id"] in (d["sample_id"], d["kept"]["sample_id"])):
        explain_json(report, d["package_id"], d["sample_id"])


@pytest.mark.parametrize("forgery", ["decision_5", "duplicated_line"])
def test_diff_refuses_forged_decisions(tmp_path, sample_days, forgery):
    report = tmp_path / "report"
    shutil.copytree(sample_days["2026-11-26"], report)

    def forge(rows: list[dict]) -> None:
        if forgery == "decision_5":
            rows[0]["decision"] = 5
        else:
            rows.insert(1, dict(rows[0]))

    edit_lines(report / "decisions.jsonl", forge)
    reseal(report)
    message = cli_fail("report", "diff", sample_days["2026-11-25"], report)
    assert f"report {report}: decisions.jsonl:" in message


def test_diff_refuses_reports_of_different_kinds(tmp_path, sample_days):
    sft = scan(tmp_path / "sft.sqlite", [SAMPLES / "sft" / "sft-v1"], tmp_path / "near-sft")
    message = cli_fail("report", "diff", sample_days["2026-11-25"], sft)
    assert "reports of different kinds of data cannot be compared" in message
    assert "sft" in message and "cpt" in message


# --------------------------------------------------------------------------- answers


@pytest.fixture(scope="module")
def readme_report(tmp_path_factory) -> Path:
    """The README's demo report: cpt-v1 and cpt-v2 in one pool."""
    root = tmp_path_factory.mktemp("readme")
    return scan(root / "i.sqlite", [SAMPLES / "cpt" / "2026-11-25" / "cpt-v1",
                                    SAMPLES / "cpt" / "2026-11-26" / "cpt-v2"], root / "report")


def test_explain_says_each_partners_own_decision_and_why_the_kept_one(readme_report):
    """cpt-v2/web-0009 is an exact copy of cpt-v1/web-0009, which was itself excluded in
    favour of cpt-v1/web-0021: the answer says so, instead of listing a 1.0 match beside a
    decision that names another sample."""
    rows = decisions(readme_report)
    e, _ = explain_json(readme_report, "cpt-v2", "web-0009")
    first = rows[("cpt-v1", "web-0009")]
    assert first["decision"] == "exclude" and e["kept"]["sample_id"] == first["kept"]["sample_id"]
    for r in e["relations"]:
        own = rows[(r["partner"]["package_id"], r["partner"]["sample_id"])]
        assert (r["partner_decision"], r["partner_reason"], r["partner_kept"]) == \
            (own["decision"], own["reason"], own["kept"])
    kept = f"{first['kept']['package_id']}/{first['kept']['sample_id']}"
    assert e["why"] == (f"Excluded in favour of {kept} (Jaccard {e['jaccard']:.4f}) because it "
                        f"is an exact copy of the earlier cpt-v1/web-0009, which was itself "
                        f"excluded in favour of {kept}: every copy of a text gets the first "
                        f"copy's decision.")
    out, _ = cli_ok("report", "explain", readme_report, "cpt-v2", "web-0009")
    assert f"exclude (near_duplicate of {kept})" in out and "why       Excluded in favour" in out
    # pool-only report: no empty sources column
    assert "sources" not in out.split("relations (")[1].split("\n")[1]
    # a first sample excluded in favour of its earliest kept match, skipping excluded ones
    for key, d in rows.items():
        if d["reason"] != "near_duplicate":
            continue
        e, _ = explain_json(readme_report, *key)
        if not any(r["kind"] == "exact" and r["listed_as"] == "sample" for r in e["relations"]):
            name = f"{d['kept']['package_id']}/{d['kept']['sample_id']}"
            assert e["why"].startswith(f"Excluded in favour of {name} (Jaccard "
                                       f"{d['jaccard']:.4f}, at or above the threshold) "
                                       f"because {name} is the earliest kept sample"), e["why"]
            assert e["why"].count(". ") == 0 and e["why"].endswith(".")  # one sentence
            break
    else:
        pytest.fail("no first sample excluded as a near duplicate in the demo report")


def test_explain_lists_history_sources_only_when_there_are_some(sample_days):
    report = sample_days["2026-11-26"]
    rel = next(json.loads(line) for line in (report / "relations.jsonl").read_text()
               .splitlines() if json.loads(line)["history_only"])
    out, _ = cli_ok("report", "explain", report, rel["sample"]["package_id"],
                    rel["sample"]["sample_id"])
    assert "history sources" in out and "cpt-v1/" in out


def content_outcomes(report: Path) -> dict[tuple[str, str], tuple]:
    """(content_id, split) -> (decision, reason, content_id of the kept partner), computed
    from decisions.jsonl alone: a content is kept if one of its samples is."""
    rows = decisions(report)
    out: dict[tuple[str, str], tuple] = {}
    for d in rows.values():
        ck = (d["content_id"], d["split"])
        kept = d["kept"] and rows[(d["kept"]["package_id"], d["kept"]["sample_id"])]
        outcome = (d["decision"], d["reason"], kept["content_id"] if kept else None)
        if d["decision"] == "keep" or ck not in out:
            out[ck] = outcome
    return out


def test_diff_of_consecutive_days_matches_contents(sample_days):
    """Each day's pool holds another package: by sample every sample is only old or only
    new, by content the diff says which contents changed and which are new or gone."""
    old, new = sample_days["2026-11-26"], sample_days["2026-11-27"]
    diff = diff_json(old, new)
    c = diff["contents"]
    was, now = content_outcomes(old), content_outcomes(new)
    assert {(x["content_id"], x["split"]) for x in c["new"]} == now.keys() - was.keys()
    assert {(x["content_id"], x["split"]) for x in c["gone"]} == was.keys() - now.keys()
    both = was.keys() & now.keys()
    expected = {
        "newly_excluded": {k for k in both if (was[k][0], now[k][0]) == ("keep", "exclude")},
        "newly_kept": {k for k in both if (was[k][0], now[k][0]) == ("exclude", "keep")},
        "changed": {k for k in both if was[k][0] == now[k][0] and was[k][1:] != now[k][1:]}}
    for name, keys in expected.items():
        assert {(x["content_id"], x["split"]) for x in c[name]} == keys, name
    changed = [x for name in expected for x in c[name]]
    assert changed, "the demo's third day changes a decision by content"
    for x in changed:
        k = (x["content_id"], x["split"])
        assert (x["old"]["decision"], x["old"]["reason"]) == was[k][:2]
        assert (x["new"]["decision"], x["new"]["reason"]) == now[k][:2]
        assert (x["old"]["kept"] or {}).get("content_id") == was[k][2]
    for name in (*expected, "new", "gone"):
        keys = [(x["content_id"], x["split"]) for x in c[name]]
        assert keys == sorted(keys), name
    counts = c["counts"]
    assert (counts["old_contents"], counts["new_contents"], counts["in_both"]) == \
        (len(was), len(now), len(both))
    assert sum(r["new"] for r in counts["new_or_gone_by_reason"]) == len(c["new"])
    assert sum(r["gone"] for r in counts["by_domain"]) == len(c["gone"])
    for name in ("only_old", "only_new"):
        keys = [(x["package_id"], x["sample_id"]) for x in diff[name]]
        assert keys == sorted(keys)
    out, _ = cli_ok("report", "diff", old, new)
    assert "contents (matched by content_id within a split)" in out
    assert "contents newly kept (" in out or "contents newly excluded (" in out


def test_diff_json_into_a_closed_pipe_closes_quietly(sample_days):
    """`report diff … --json | head -1`: no "Broken pipe" message."""
    import subprocess
    import sys

    from helpers import REPO

    cmd = [sys.executable, "-m", "near_dedup_core", "report", "diff",
           sample_days["2026-11-25"], sample_days["2026-11-27"], "--json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first byte
    err = proc.stderr.read()
    assert proc.wait() == 0 and err == b"", err


def test_diff_of_a_report_with_itself_prints_its_empty_tables(sample_days):
    """Nothing changed: every table of changes is empty, and still printed."""
    report = sample_days["2026-11-26"]
    out, err = cli_ok("report", "diff", report, report)
    assert "newly excluded                    0" in out and "domain  +excluded" in out, err
