"""`report html`: the static site of a frozen report, built for real and opened in headless
Chromium from ``file://``.

Reports are real scans of the bundled sample CPT days (three versions, guard blocks, near and
exact duplicates) and of a small pool whose texts carry markup (``<script>``) that must show
as text. The site's explanations are compared with `report explain`'s, sample by sample.
Screenshots of the overview and of the largest cluster are written under pytest's tmp path
and, when ``NEAR_DEDUP_ARTIFACTS`` is set, copied into that folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from html import escape as html_escape
from pathlib import Path

import pytest
from helpers import SAMPLES, make_package, run_cli, stdlib_paragraphs, tree_bytes

from near_dedup_core.audit import explain_sample
from near_dedup_core.audit.textdiff import Span, merge_close
from near_dedup_core.errors import NearDedupError
from near_dedup_core.guard import Guard
from near_dedup_core.normalize import normalize
from near_dedup_core.site.views import LINE_CONTEXT, MAX_SPANS

#: headless Chromium and whole reports built per test: left out by `make test-fast`
pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
CPT_DAYS = {"2026-11-25": "cpt-v1", "2026-11-26": "cpt-v2", "2026-11-27": "cpt-v3"}
XSS = "<script>window.near_dedup_pwned = 1; document.title = 'pwned';</script>"


def cli_ok(*argv: object) -> str:
    code, out, err = run_cli("--quiet", *argv)
    assert code == 0, err
    return out


def cli_fail(*argv: object) -> str:
    code, out, err = run_cli("--quiet", *argv)
    lines = err.strip().splitlines()
    assert code == 1 and out == "", (code, out, err)
    assert len(lines) == 1 and lines[0].startswith("near-dedup: error: "), err
    return lines[0]


def scan_days(root: Path, days: list[str], name: str) -> Path:
    idx = root / f"{name}.sqlite"
    packages = [SAMPLES / "cpt" / d / CPT_DAYS[d] for d in days]
    for pkg in packages:
        cli_ok("--index", idx, "index", "--inputs", pkg, "--workers", 1)
    cli_ok("--index", idx, "scan", "--inputs", *packages, "--output", root / name,
           "--workers", 1)
    return root / name


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("site-reports")
    days = sorted(CPT_DAYS)
    return {"new": scan_days(root, days, "rep3"), "old": scan_days(root, days[:2], "rep2"),
            "root": root}


@pytest.fixture(scope="module")
def site(reports) -> Path:
    out = reports["root"] / "site"
    cli_ok("report", "html", reports["new"], "--against", reports["old"], "--output", out)
    return out


def shard_records(site: Path) -> dict[tuple[str, str], dict]:
    """Every sample record of the search data files."""
    out = {}
    for path in sorted((site / "data" / "samples").glob("*.js")):
        text = path.read_text(encoding="utf-8")
        body = text[text.index("{"):text.rindex("}") + 1]
        for key, rec in json.loads(body).items():
            pkg, _, sid = key.partition("\n")
            out[(pkg, sid)] = rec
    return out


def decisions(report: Path) -> list[dict]:
    return [json.loads(line) for line in (report / "decisions.jsonl").read_text().splitlines()]


# --------------------------------------------------------------------------- without a browser


def test_site_is_deterministic_checksummed_and_leaves_the_report_alone(reports, site, tmp_path):
    before = tree_bytes(reports["new"])
    again = tmp_path / "again"
    cli_ok("report", "html", reports["new"], "--against", reports["old"], "--output", again)
    assert tree_bytes(site) == tree_bytes(again)
    check = subprocess.run(["sha256sum", "-c", "--quiet", "checksums.sha256"], cwd=site,
                           capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    listed = {line.split("  ", 1)[1] for line in
              (site / "checksums.sha256").read_text().splitlines()}
    assert listed == {p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file()
                      } - {"checksums.sha256"}
    assert tree_bytes(reports["new"]) == before
    assert "OK" in cli_ok("report", "verify", reports["new"])
    assert not list(site.parent.glob(".site.tmp-*"))


def test_worker_processes_write_the_same_site(reports, site, tmp_path, monkeypatch):
    """A large report's packages are read beside the verifier and its search data written by
    worker processes, a range of decisions.jsonl lines per task: the same bytes as one
    process writes for a small report."""
    from near_dedup_core.site import build
    from near_dedup_core.site.pages import search

    monkeypatch.setattr(build, "POOL_SAMPLES", 0)
    monkeypatch.setattr(search, "SEARCH_TASK", 7)
    samples = len(decisions(reports["new"]))
    assert samples > 3 * search.SEARCH_TASK
    out = tmp_path / "pooled"
    result = build.build_site(reports["new"], out, against=reports["old"])
    assert result.samples == samples
    assert tree_bytes(out) == tree_bytes(site)
    assert not list((out / "data" / "samples").glob(".part-*"))
    # the report is verified by a worker meanwhile: a tampered one is refused with the
    # verifier's problem, and nothing is written
    for n, (old, new) in enumerate((('"keep"', '"exclude"'), ('"decision"', '"decision'))):
        bad = tmp_path / f"bad{n}"
        shutil.copytree(reports["new"], bad)
        path = bad / "decisions.jsonl"
        path.write_text(path.read_text().replace(old, new, 1))
        with pytest.raises(NearDedupError, match="decisions.jsonl"):
            build.build_site(bad, tmp_path / f"site{n}")
        assert not (tmp_path / f"site{n}").exists()
        assert not list(tmp_path.glob(".site*"))


def test_no_page_points_outside_the_folder(site):
    for path in site.rglob("*.html"):
        html = path.read_text(encoding="utf-8")
        assert not re.search(r"""(src|href|action)\s*=\s*["']?(https?:|//)""", html), path
        assert "Content-Security-Policy" in html and "default-src 'none'" in html
        assert "<script>" not in html, f"inline script in {path}"
    assert not re.search(r"https?://", (site / "static" / "search.js").read_text())
    assert not re.search(r"url\(|@import", (site / "static" / "site.css").read_text())


def test_the_overview_shows_the_manifest_counts_and_the_rate_findings(reports, site):
    manifest = json.loads((reports["new"] / "manifest.json").read_text())
    html = (site / "index.html").read_text()
    c = manifest["counts"]
    for name, key in (("samples", "samples"), ("keep", "keep"), ("exclude", "exclude"),
                      ("blocked", "blocked_relations"), ("history", "history_only_relations")):
        assert f'<span id="count-{name}">{c[key]:,}</span>' in html
    assert manifest["config_fingerprint"] in html
    for item in manifest["inputs"]:
        assert item["package_id"] in html and item["path"] in html
    # the sample days exclude more than half of cpt-v3: the release's rule names it
    assert re.search(r"<td>package</td><td>cpt-v3</td><td>max_exclusion_rate</td>", html)
    assert f"threshold {manifest['config']['threshold']}" in html


def test_every_sample_has_the_explanation_of_report_explain(reports, site):
    records = shard_records(site)
    rows = decisions(reports["new"])
    assert set(records) == {(d["package_id"], d["sample_id"]) for d in rows}
    compared = 0
    for d in rows:
        key = (d["package_id"], d["sample_id"])
        rec = records[key]
        e = explain_sample(reports["new"], *key)
        j = e.to_json()
        assert rec["decision"] == j["decision"] and rec["reason"] == j["reason"]
        assert rec["jaccard"] == j["jaccard"] and rec["why"] == j["why"]
        assert rec["kept"] == (None if j["kept"] is None else
                               {"package_id": j["kept"]["package_id"],
                                "sample_id": j["kept"]["sample_id"]})
        assert rec.get("relations", []) == j["relations"]
        assert rec.get("excluded_because_of_it", []) == j["excluded_because_of_it"]
        sample = {k: v for k, v in j["sample"].items() if k != "text_available"}
        assert {k: rec[k] for k in sample} == sample
        if "diff" in rec:  # an excluded sample against its kept partner, as explain shows it
            a, b = e.texts["partner"], e.texts["sample"]
            spans = merge_close(a, b, [Span(**s) for s in j["diff"]])[:MAX_SPANS]
            assert rec["diff"]["spans"] == len(j["diff"])
            assert [line[1:3] for line in rec["diff"]["lines"]] == \
                [[s.a_text, s.b_text] for s in spans]
            assert all(line[0].endswith(a[max(0, s.a_start - LINE_CONTEXT):s.a_start])
                       for line, s in zip(rec["diff"]["lines"], spans, strict=True))
            compared += 1
    excluded = sum(d["decision"] == "exclude" for d in rows)
    assert compared == excluded  # the sample report is small: every exclusion has its diff


def test_the_changes_page_is_report_diff(reports, site):
    out = json.loads(cli_ok("report", "diff", reports["old"], reports["new"], "--json"))
    html = (site / "changes" / "index.html").read_text()
    assert ('id="config-changed"' in html) == out["config_changed"]["changed"]
    for name in ("newly_excluded", "newly_kept", "changed_kept", "only_old", "only_new"):
        assert f'id="n-{name}">{len(out[name]):,}</td>' in html
        for item in out[name][:20]:
            assert f"{item['package_id']}/{item['sample_id']}</a>" in html
    # the contents matched across the days, by content id within a split
    contents = out["contents"]
    assert contents["new"] and contents["counts"]["in_both"]
    for name in ("newly_excluded", "newly_kept", "changed", "gone", "new"):
        assert f'id="n-contents-{name}">{len(contents[name]):,}</td>' in html
        for item in contents[name][:20]:
            assert f'<code title="{item["content_id"]}">' in html
    for row in contents["counts"]["by_domain"]:
        assert f"<td>{row['domain'] if row['domain'] is not None else '(unknown)'}</td>" in html


def test_a_tampered_report_is_refused_with_one_line(reports, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(reports["new"], bad)
    path = bad / "decisions.jsonl"
    path.write_text(path.read_text().replace('"keep"', '"exclude"', 1))
    line = cli_fail("report", "html", bad, "--output", tmp_path / "site")
    assert "decisions.jsonl" in line
    assert not (tmp_path / "site").exists()
    assert not list(tmp_path.glob(".site.tmp-*"))


def test_existing_output_and_output_inside_the_report_are_refused(reports, site, tmp_path):
    before = tree_bytes(site)
    assert "already exists" in cli_fail("report", "html", reports["new"], "--output", site)
    assert tree_bytes(site) == before
    assert "inside" in cli_fail("report", "html", reports["new"], "--output",
                                reports["new"] / "site")
    assert not (reports["new"] / "site").exists()
    assert "OK" in cli_ok("report", "verify", reports["new"])


def test_moved_inputs_are_found_with_inputs(tmp_path):
    """The report names its packages by path; after a move the pages keep everything from
    the report and say the texts are missing, and --inputs reads them where they are now."""
    prose = " ".join(stdlib_paragraphs()[3:6])
    words = prose.split(" ")
    words[30] = "CHANGED"
    pkg = make_package(tmp_path, "moving-v1", {"train": [
        {"id": "a", "text": prose, "domain": "web"},
        {"id": "b", "text": " ".join(words), "domain": "web"}]})
    idx = tmp_path / "idx.sqlite"
    cli_ok("--index", idx, "index", "--inputs", pkg, "--workers", 1)
    cli_ok("--index", idx, "scan", "--inputs", pkg, "--output", tmp_path / "report",
           "--workers", 1)
    moved = tmp_path / "elsewhere" / "moving-v1"
    moved.parent.mkdir()
    pkg.rename(moved)
    code, out, err = run_cli("--quiet", "report", "html", tmp_path / "report", "--output",
                             tmp_path / "site1")
    assert code == 0 and "note: package moving-v1 is no longer readable" in err, err
    page = (tmp_path / "site1" / "clusters" / "c-1.html").read_text()
    assert "a text is not available" in page and "<ins>" not in page
    cli_ok("report", "html", tmp_path / "report", "--inputs", moved, "--output",
           tmp_path / "site2")
    page = (tmp_path / "site2" / "clusters" / "c-1.html").read_text()
    assert re.search(r"<ins>[^<]*chang[^<]*</ins>", page), page
    other = make_package(tmp_path, "not-an-input", {"train": [{"id": "a", "text": "x" * 50,
                                                                "domain": "web"}]})
    assert "not an input of the report" in cli_fail("report", "html", tmp_path / "report",
                                                     "--inputs", other, "--output",
                                                     tmp_path / "site3")


def test_guard_tokens_are_the_guard_sequences():
    guard = Guard()
    texts = ["price $5 and 3.5 kg, 50% of 1,000 usd 7", "no numbers at all",
             "我们在2019年花了三万元，百分之三的人在第五章里，共5公斤，¥5，两千五百米",
             "约3.5万人参加，耗时十多天，温度为摄氏度二十"]
    for raw in texts:
        text = normalize(raw)
        tokens = guard.tokens(text)
        numbers, units = guard.sequences(text)
        assert tuple(n for t in tokens for n in t[2]) == numbers
        assert tuple(u for t in tokens for u in t[3]) == units
        assert all(0 <= s < e <= len(text) for s, e, _, _ in tokens)
    spans = [normalize(texts[2])[s:e] for s, e, _, _ in guard.tokens(normalize(texts[2]))]
    assert "三万元" in spans and "百分之三" in spans and "¥5" in spans


@pytest.fixture(scope="module")
def small_budget_site(reports, tmp_path_factory) -> Path:
    """The site of the sample days with tiny caps, built by worker processes: one cluster
    with a page listing two members, two diffs per diff page, one diff page per task."""
    from near_dedup_core.site import build, diffs, model

    out = tmp_path_factory.mktemp("site-small-budget") / "site"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(model, "CLUSTER_PAGES", 1)
        mp.setattr(model, "CLUSTERS_PER_SOURCE", 0)
        mp.setattr(model, "CLUSTER_MEMBERS", 2)
        mp.setattr(model, "DIFFS_PER_PAGE", 2)
        mp.setattr(diffs, "DIFF_TASK", 3)
        mp.setattr(build, "POOL_SAMPLES", 0)
        build.build_site(reports["new"], out)
        again = out.parent / "in-one-process"
        mp.setattr(build, "POOL_SAMPLES", 10**9)
        build.build_site(reports["new"], again)
    assert tree_bytes(out) == tree_bytes(again)
    return out


def diff_section(site: Path, page: str) -> str:
    """The HTML of the diff section a search record's ``diff.page`` points at."""
    rel, _, anchor = page.partition("#")
    html = (site / rel).read_text(encoding="utf-8")
    m = re.search(rf'<section class="diff" id="{re.escape(anchor)}">(.*?)</section>', html,
                  re.DOTALL)
    assert m, page
    return m.group(1)


def test_every_excluded_sample_reaches_its_diff(reports, small_budget_site):
    """Beyond the members a cluster page lists, every excluded sample's diff against its
    kept partner is on a diff page, with the edits `report explain` finds marked."""
    site = small_budget_site
    records = shard_records(site)
    rows = [d for d in decisions(reports["new"]) if d["decision"] == "exclude"]
    assert len(rows) > 4
    on_pages = 0
    for d in rows:
        key = (d["package_id"], d["sample_id"])
        rec = records[key]
        kept = d["kept"]
        assert rec["diff"]["partner"] == kept
        section = diff_section(site, rec["diff"]["page"])
        head = section[:section.index("</h3>")]
        assert f"{d['package_id']}/{d['sample_id']}</a> excluded" in head
        assert "in favour of <a class=\"sample\"" in head
        assert f"{kept['package_id']}/{kept['sample_id']}</a>" in head
        e = explain_sample(reports["new"], *key)
        marked = set(re.findall(r"<(?:ins|del)>(.*?)</(?:ins|del)>", section, re.DOTALL))
        if not e.diff:
            assert "The normalized texts are identical" in section and not marked
        else:
            a, b = e.texts["partner"], e.texts["sample"]
            spans = merge_close(a, b, [Span(**s) for s in e.to_json()["diff"]])
            edits = {html_escape(t) for s in spans for t in (s.a_text, s.b_text) if t}
            assert marked == edits, (key, marked, edits)
        if rec["diff"]["page"].startswith("diffs/"):
            on_pages += 1
            assert "lines" not in rec["diff"]
    assert on_pages > len(rows) // 2
    pages = sorted((site / "diffs").glob("*.html"))
    assert len(pages) == -(-on_pages // 2)


def test_the_last_member_of_a_large_cluster_reaches_its_diff(reports, small_budget_site):
    site = small_budget_site
    records = shard_records(site)
    cluster = (site / "clusters" / "c-1.html").read_text(encoding="utf-8")
    assert re.search(r"First 2 of (\d+) members", cluster)
    members = [(d["package_id"], d["sample_id"]) for d in decisions(reports["new"])
               if records[(d["package_id"], d["sample_id"])].get("cluster") == 1]
    assert len(members) > 2
    last = next(k for k in reversed(members) if records[k]["decision"] == "exclude")
    page = records[last]["diff"]["page"]
    assert page.startswith("diffs/")
    diff_section(site, page)
    # the cluster page links the diff pages of its members it does not list
    assert re.search(r'<a href="\.\./diffs/(index|page-\d+)\.html#s-[0-9a-f]{8}">diff pages</a>',
                     cluster)
    # a cluster without a page links its first diff from the cluster list
    listing = (site / "clusters" / "index.html").read_text(encoding="utf-8")
    assert re.search(r'\(<a href="\.\./diffs/(index|page-\d+)\.html#s-[0-9a-f]{8}">diffs</a>\)',
                     listing)


# --------------------------------------------------------------------------- markup in texts


@pytest.fixture(scope="module")
def xss_site(tmp_path_factory) -> tuple[Path, str]:
    """A pool whose kept sample and its near duplicate both hold a <script> element."""
    root = tmp_path_factory.mktemp("site-xss")
    prose = " ".join(stdlib_paragraphs()[:3])
    first = f"{XSS} {prose}"
    words = first.split(" ")
    words[40] = "EDITED"
    second = " ".join(words)
    pkg = make_package(root, "xss-v1", {"train": [
        {"id": "a", "text": first, "domain": "web", "source": {"note": "<b>bold?</b>"}},
        {"id": "b", "text": second, "domain": "web"},
        {"id": "c", "text": "An unrelated text about something else entirely, " * 6,
         "domain": "web"}]})
    idx = root / "idx.sqlite"
    cli_ok("--index", idx, "index", "--inputs", pkg, "--workers", 1)
    cli_ok("--index", idx, "scan", "--inputs", pkg, "--output", root / "report", "--workers", 1)
    out = root / "site"
    cli_ok("report", "html", root / "report", "--output", out)
    return out, "b"


def test_markup_in_a_text_is_escaped_in_the_html(xss_site):
    site, _ = xss_site
    page = (site / "clusters" / "c-1.html").read_text()
    assert "&lt;script&gt;window.near_dedup_pwned" in page
    assert "<script>window" not in page


# --------------------------------------------------------------------------- in Chromium


def _artifact(path: Path) -> None:
    folder = os.environ.get("NEAR_DEDUP_ARTIFACTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(folder) / path.name)


@pytest.fixture(scope="module")
def browser():
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip("Chromium is missing: apt-get install -y chromium chromium-driver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--window-size=1400,1600"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def requested_urls(driver) -> list[str]:
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def wait_for(driver, css: str, timeout: float = 20.0):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(
        ec.presence_of_element_located((By.CSS_SELECTOR, css)))


def test_in_chromium_overview_cluster_diff_and_search(reports, site, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    driver = browser
    driver.get_log("performance")
    manifest = json.loads((reports["new"] / "manifest.json").read_text())

    started = time.monotonic()
    driver.get((site / "index.html").as_uri())
    wait_for(driver, "#count-exclude")
    assert time.monotonic() - started < 10
    c = manifest["counts"]
    assert driver.find_element(By.ID, "count-samples").text == f"{c['samples']:,}"
    assert driver.find_element(By.ID, "count-keep").text == f"{c['keep']:,}"
    assert driver.find_element(By.ID, "count-exclude").text == f"{c['exclude']:,}"
    shot = tmp_path / "site-overview.png"
    driver.save_screenshot(str(shot))
    assert shot.stat().st_size > 20_000
    _artifact(shot)

    # the largest cluster: from the list, its excluded members' diffs with the edits marked
    driver.find_element(By.LINK_TEXT, "Clusters").click()
    wait_for(driver, "table.clusters")
    driver.find_element(By.LINK_TEXT, "#1").click()
    wait_for(driver, "section.diff")
    assert driver.title.startswith("Cluster 1 ")
    marked = [e for e in driver.find_elements(By.CSS_SELECTOR, "section.diff ins, "
                                                               "section.diff del")]
    assert marked, "the largest cluster of the sample days has a near duplicate with edits"
    section = marked[0].find_element(By.XPATH, "ancestor::section[1]")
    sample_link, partner_link = section.find_elements(By.CSS_SELECTOR, "h3 a.sample")[:2]
    pkg, sid = sample_link.text.split("/", 1)
    e = explain_sample(reports["new"], pkg, sid)
    assert partner_link.text == f"{e.kept['package_id']}/{e.kept['sample_id']}"
    edits = {s["b_text"].strip() for s in e.diff if s["b_text"].strip()} | \
        {s["a_text"].strip() for s in e.diff if s["a_text"].strip()}
    shown = {m.text.strip() for m in section.find_elements(By.CSS_SELECTOR, "ins, del")}
    assert shown and shown <= edits | {m.strip() for m in shown if m.strip() in "".join(edits)}
    assert shown & edits
    shot = tmp_path / "site-cluster.png"
    driver.save_screenshot(str(shot))
    _artifact(shot)

    # find a sample: an excluded one, with its kept partner and the diff's edits
    driver.find_element(By.LINK_TEXT, "Find a sample").click()
    wait_for(driver, "#find")
    Select(driver.find_element(By.ID, "package")).select_by_value(pkg)
    box = driver.find_element(By.ID, "sample-id")
    box.clear()
    box.send_keys(sid)
    driver.find_element(By.ID, "go").click()
    wait_for(driver, "#explanation")
    assert driver.find_element(By.ID, "decision").text == f"exclude ({e.reason})"
    assert driver.find_element(By.ID, "why").text == e.why
    explanation = driver.find_element(By.ID, "explanation").text
    for r in e.relations:  # each partner's own decision, as report explain prints it
        if r["partner_decision"] is not None:
            assert f"{r['partner_decision']} ({r['partner_reason']}" in explanation
    assert driver.find_element(By.ID, "kept").text.startswith(
        f"{e.kept['package_id']}/{e.kept['sample_id']}, jaccard {e.jaccard:.4f}")
    assert {m.text.strip() for m in driver.find_elements(
        By.CSS_SELECTOR, "#explanation ins, #explanation del")} & edits
    driver.find_element(By.ID, "diff-page").click()
    wait_for(driver, "section.diff")
    assert "clusters/c-" in driver.current_url

    # an unknown id says so
    driver.get((site / "search.html").as_uri() + "#p=cpt-v1&s=no-such-sample")
    assert "No sample no-such-sample" in wait_for(driver, "#result .notfound").text

    urls = requested_urls(driver)
    assert urls and all(u.startswith("file://") for u in urls), \
        [u for u in urls if not u.startswith("file://")]
    assert any("/data/samples/" in u for u in urls)  # the search loaded a shard file
    severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not severe, severe


def test_in_chromium_search_reaches_a_diff_page(reports, small_budget_site, browser):
    """An excluded sample not listed on a cluster page: Find a sample links its diff page,
    which shows it side by side with its kept partner, the edits marked."""
    from selenium.webdriver.common.by import By

    site, driver = small_budget_site, browser
    driver.get_log("performance")
    records = shard_records(site)
    key = next(k for k in reversed(list(records)) if records[k]["decision"] == "exclude"
               and records[k]["diff"]["page"].startswith("diffs/")
               and explain_sample(reports["new"], *k).diff)
    driver.get((site / "search.html").as_uri() + f"#p={key[0]}&s={key[1]}")
    wait_for(driver, "#explanation")
    driver.find_element(By.ID, "diff-page").click()
    wait_for(driver, "section.diff")
    assert "/diffs/" in driver.current_url
    anchor = driver.current_url.rsplit("#", 1)[1]
    section = driver.find_element(By.ID, anchor)
    links = [a.text for a in section.find_elements(By.CSS_SELECTOR, "h3 a.sample")]
    kept = records[key]["kept"]
    assert links[:2] == [f"{key[0]}/{key[1]}", f"{kept['package_id']}/{kept['sample_id']}"]
    assert section.find_elements(By.CSS_SELECTOR, "ins, del")
    assert all(u.startswith("file://") for u in requested_urls(driver))


def test_in_chromium_a_script_in_a_sample_is_text(xss_site, browser):
    from selenium.webdriver.common.by import By

    site, sid = xss_site
    driver = browser
    driver.get_log("performance")
    driver.get((site / "clusters" / "c-1.html").as_uri())
    wait_for(driver, "section.diff")
    assert driver.execute_script("return window.near_dedup_pwned") is None
    assert driver.title != "pwned"
    assert "<script>window.near_dedup_pwned" in driver.find_element(By.TAG_NAME, "main").text
    driver.get((site / "search.html").as_uri() + f"#p=xss-v1&s={sid}")
    wait_for(driver, "#explanation")
    driver.get((site / "search.html").as_uri() + "#p=xss-v1&s=a")
    wait_for(driver, "#explanation")
    assert "<b>bold?</b>" in driver.find_element(By.ID, "explanation").text
    assert driver.execute_script("return window.near_dedup_pwned") is None
    assert all(u.startswith("file://") for u in requested_urls(driver))


# --------------------------------------------------------------------------- daily release


def test_the_daily_release_writes_each_days_site_and_links_it(tmp_path):
    """scan_report's metadata names the day's site, written next to the report; the second
    day's site has the changes against the first; a stale site is refused, not replaced."""
    import dagster as dg
    from test_assets import (
        DAYS,
        SCAN_REPORT,
        metadata,
        release,
        release_days_on_disk,
        settings_for,
    )

    from near_dedup_core.site import site_of

    settings = settings_for(tmp_path / "out", release_days_on_disk(tmp_path / "snapshots"))
    with dg.instance_for_test() as instance:
        for day in DAYS[:2]:
            result = release(day, settings, instance)
            assert result.success, day
            page = Path(metadata(result, SCAN_REPORT)["site"])
            report = settings.report_dir(day).local_path
            assert page == report.with_name(f"{report.name}-site") / "index.html"
            assert page.is_file() and site_of(page.parent, report)
            assert (page.parent / "changes" / "index.html").is_file() == (day == DAYS[1])
        before = tree_bytes(page.parent)
        again = release(DAYS[1], settings, instance)  # the same report: the site is kept
        assert again.success and tree_bytes(page.parent) == before
        day1 = settings.report_dir(DAYS[0]).local_path
        first = day1.with_name(f"{day1.name}-site")
        assert not site_of(first, settings.report_dir(DAYS[1]).local_path)
        # a site that is not the report's own (here: edited) fails the day, and stays
        (page.parent / "index.html").write_text("edited", encoding="utf-8")
        failed = release(DAYS[1], settings, instance)
        assert not failed.success
        assert (page.parent / "index.html").read_text() == "edited"


def test_contamination_page_highlights_the_items_span(reports, tmp_path):
    """An eval item cut from a training sample's text: the page shows that sample with the
    item's span marked, and the item next to it."""
    pool = SAMPLES / "cpt" / "2026-11-26" / "cpt-v2"
    shard = sorted((pool / "data" / "train").glob("*.jsonl"))[0]
    first = json.loads(shard.read_text().splitlines()[0])
    words = first["text"].split(" ")
    item = " ".join(words[3:40])
    evals = make_package(tmp_path, "evals-v1", {"test": [{"id": "q1", "text": item,
                                                          "domain": "eval"},
                                                         {"id": "q2", "text": "of the"}]})
    cli_ok("contamination", "--evals", evals, "--inputs", pool, "--output", tmp_path / "contam",
           "--workers", 1)
    cli_ok("report", "html", reports["new"], "--contamination", tmp_path / "contam",
           "--output", tmp_path / "site")
    html = (tmp_path / "site" / "contamination" / "index.html").read_text()
    marked = re.findall(r'<mark class="span">([^<]*)</mark>', html)
    assert marked and any(normalize(item) in m or m in normalize(item) for m in marked)
    assert f"cpt-v2/{first['id']}</a>" in html
    assert "containment, containment" in html and "<code>" + normalize(item) in html
    assert "Set aside: common in the pool" in html and "evals-v1/q2</td><td>common" in html
    line = cli_fail("report", "html", reports["new"], "--contamination", reports["old"],
                    "--output", tmp_path / "site2")
    assert "not a contamination report" in line


def test_non_transitive_cases_are_shown_as_such(reports, site):
    """A sample kept although it matches an excluded one (A≈B, B≈C, A≉C): its cluster page
    says which match was excluded in favour of what, and that it does not match that."""
    records = shard_records(site)
    cases = [d for d in decisions(reports["new"]) if d["reason"] == "match_not_kept"]
    assert cases, "the sample days have such a case"
    for d in cases:
        rec = records[(d["package_id"], d["sample_id"])]
        page = (site / rec["cluster_page"]).read_text()
        name = f"{d['package_id']}/{d['sample_id']}"
        earlier = [r for r in rec["relations"] if r["listed_as"] == "sample"
                   and r["blocked_by"] is None and r["partner"]["package_id"]]
        assert earlier and all(r["partner_decision"] == "exclude" for r in earlier)
        assert page.count(f"{name} is kept although it matches ") == len(earlier)
        for r in earlier:
            p = f"{r['partner']['package_id']}/{r['partner']['sample_id']}"
            kept = records[(r["partner"]["package_id"], r["partner"]["sample_id"])]["kept"]
            assert (f"{name} is kept although it matches {p}: {p} was itself excluded in "
                    f"favour of {kept['package_id']}/{kept['sample_id']}, and {name} does not "
                    f"match") in page


def test_a_kept_sample_is_explained_by_its_earlier_matches_only(tmp_path):
    """a matches b, which was excluded in favour of d (a≉d): a is kept (match_not_kept). e, a
    copy of a, is excluded in favour of a: that is no reason for a's decision."""
    from helpers import reverse_every

    a = " ".join(stdlib_paragraphs()[10:13])
    b = reverse_every(a, 30)
    c = reverse_every(b, 31)
    d = reverse_every(c, 32)
    pkg = make_package(tmp_path, "nt-v1", {"train": [
        {"id": i, "text": t, "domain": "web"} for i, t in zip("abcde", (a, b, c, d, a), strict=True)]})
    idx = tmp_path / "idx.sqlite"
    cli_ok("--index", idx, "index", "--inputs", pkg, "--workers", 1)
    cli_ok("--index", idx, "scan", "--inputs", pkg, "--output", tmp_path / "r", "--workers", 1)
    rows = {x["sample_id"]: x for x in decisions(tmp_path / "r")}
    assert rows["a"]["reason"] == "match_not_kept" and rows["b"]["kept"]["sample_id"] == "d"
    assert rows["e"]["kept"]["sample_id"] == "a"
    cli_ok("report", "html", tmp_path / "r", "--output", tmp_path / "site")
    page = (tmp_path / "site" / "clusters" / "c-1.html").read_text()
    assert ("nt-v1/a is kept although it matches nt-v1/b: nt-v1/b was itself excluded in "
            "favour of nt-v1/d, and nt-v1/a does not match nt-v1/d") in page
    assert page.count("nt-v1/a is kept although") == 1
