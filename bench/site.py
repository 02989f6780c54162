"""`report html` on a large report, through the CLI, under /usr/bin/time -v.

The report is `bench.audit`'s base report: a synthetic CPT package of ``--records`` samples
(pseudo-word prose, 3 % exact and 5 % near copies, four domains), indexed and scanned with
the shipped config (built on first use, kept under ``bench/out/audit-<size>/``). Then
``report html`` builds its site, ``--rounds`` times; with ``--base DIR`` (another checkout,
e.g. ``git worktree add bench/out/tree-REV REV``) that code builds it too, the two
alternating, and the sites are compared byte for byte. Measured per build: wall, CPU (user +
system, the whole process tree), peak memory (largest process and the summed tree), and the
site's files and bytes; with ``--chromium``, how long the new site's overview, cluster list
and first diff page take to open in headless Chromium (navigation to the load event).

    .venv/bin/python -m bench.site --records 1000000 --base bench/out/tree-REV --chromium
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import shutil
import sys
from pathlib import Path

from bench.audit import CONFIG, write_package
from bench.measure import code_version, read_through, run, wall_clock

ROOT = Path(__file__).resolve().parent.parent


def build_report(out: Path, records: int, workers: int) -> Path:
    """`bench.audit`'s base report of ``records`` samples (built when missing)."""
    pkg = out / "pool"
    if not (pkg / "manifest.json").exists():
        write_package(pkg, records)
    report = out / "report-base"
    if not (report / "manifest.json").exists():
        idx = out / "index-base.sqlite"
        for p in (idx, idx.with_name(idx.name + "-wal"), idx.with_name(idx.name + "-shm")):
            p.unlink(missing_ok=True)
        cli = [sys.executable, "-m", "near_dedup_core", "--quiet", "--index", str(idx),
               "--config", str(CONFIG)]
        for step in (["index", "--inputs", str(pkg)],
                     ["scan", "--inputs", str(pkg), "--output", str(report)]):
            m = run([*cli, *step, "--workers", str(workers)], out / f"{step[0]}-base.log")
            if m.returncode != 0:
                raise SystemExit(f"bench.site: {step[0]} failed, see {out}/{step[0]}-base.log")
    return report


def same_tree(a: Path, b: Path) -> bool:
    """Whether two folders hold the same files with the same bytes."""
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    if files_a != files_b:
        return False
    return all(filecmp.cmp(a / f, b / f, shallow=False) for f in files_a)


def open_times(site: Path, pages: tuple[str, ...] = ("index.html", "clusters/index.html"),
               rounds: int = 3) -> dict[str, float]:
    """Seconds from navigation to the load event of each page in headless Chromium (the
    median of ``rounds`` fresh loads), as the site's own test opens it."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1600"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    out = {}
    try:
        for page in pages:
            times = []
            for _ in range(rounds):
                driver.get("about:blank")
                driver.get((site / page).as_uri())
                times.append(driver.execute_script(
                    "const t = performance.getEntriesByType('navigation')[0];"
                    "return t.loadEventEnd - t.startTime;") / 1000)
            out[page] = sorted(times)[len(times) // 2]
    finally:
        driver.quit()
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--workers", type=int, default=2, help="workers of the index and scan")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--base", type=Path, help="another checkout to compare with (alternating)")
    ap.add_argument("--chromium", action="store_true",
                    help="also time the overview and the cluster list opening in Chromium")
    args = ap.parse_args(argv)
    label = f"{args.records // 1000}k" if args.records < 1_000_000 else \
        f"{args.records // 1_000_000}m"
    out = ROOT / "bench" / "out" / f"audit-{label}"
    out.mkdir(parents=True, exist_ok=True)
    report = build_report(out, args.records, args.workers)
    trees = {"new": ROOT}
    if args.base is not None:
        trees = {"base": args.base.resolve(), **trees}
        # the report names its package by a path relative to the checkout it was built in:
        # the other checkout reaches the same folder through a link
        there = trees["base"] / out.relative_to(ROOT)
        if not there.exists():
            there.parent.mkdir(parents=True, exist_ok=True)
            there.symlink_to(out)
    results: dict = {"code": code_version(ROOT), "started": wall_clock(),
                     "records": args.records, "builds": []}
    sites: dict[str, Path] = {}
    for r in range(args.rounds):
        for name, tree in trees.items():
            site = out / f"site-{name}"
            shutil.rmtree(site, ignore_errors=True)
            read_through(report, out / "pool")
            env = {**os.environ, "PYTHONPATH": str(tree)}
            m = run([sys.executable, "-m", "near_dedup_core", "--quiet", "report", "html",
                     str(report), "--output", str(site)], out / f"site-{name}.log", cwd=tree,
                    env=env)
            if m.returncode != 0:
                raise SystemExit(f"bench.site: report html ({name}) failed: {m.stderr_tail}")
            files = [p for p in site.rglob("*") if p.is_file()]
            row = {"round": r + 1, "code": name, **m.as_dict(), "stdout": None,
                   "site_files": len(files), "site_bytes": sum(p.stat().st_size for p in files)}
            results["builds"].append(row)
            sites[name] = site
            print(f"round {r + 1} {name:5} wall {m.wall_s:6.1f} s  CPU {m.cpu_s:6.1f} s  "
                  f"peak {m.max_rss_process_mib:6.0f} MiB (tree {m.peak_tree_rss_mib:6.0f})  "
                  f"{len(files):,} files, {row['site_bytes'] / 1e6:.1f} MB  {m.box.note()}")
    if "base" in sites:
        results["identical"] = same_tree(sites["base"], sites["new"])
        print(f"sites byte-identical: {results['identical']}")
    if args.chromium:
        pages = ("index.html", "clusters/index.html", "diffs/index.html")
        results["chromium_s"] = open_times(sites["new"], tuple(
            p for p in pages if (sites["new"] / p).exists()))
        print("opened in Chromium: " + ", ".join(f"{page} {t:.2f} s"
                                                   for page, t in results["chromium_s"].items()))
    (out / "site.json").write_text(json.dumps(results, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
