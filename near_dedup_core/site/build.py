"""`report html`: a frozen report as a static site (see ``docs/site.md``).

Built from the report's files and its input packages only, like `report explain`; the report
must verify (`report.verify_report`) and is only read. The folder is written atomically
(`fsutil.atomic_dir`) with its own ``checksums.sha256``; the same report, packages and options
give the same bytes (no timestamps, everything sorted, numbers formatted explicitly).

This module verifies and reads the report (`_verify_and_read`), reads what the pages share
(`_write_pages`) and writes the folder; each page is a module of `site.pages`, the diff
pages `site.diffs`.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import orjson

from near_dedup_core import __version__
from near_dedup_core.audit.diff import diff_reports
from near_dedup_core.audit.rates import (
    DEFAULT_MAX_EXCLUSION_RATE,
    DEFAULT_MAX_RATE_JUMP,
    ReportCounts,
    count_report,
    rate_problems,
    report_domains,
)
from near_dedup_core.audit.sources import (
    Domains,
    InputPackage,
    Key,
    read_samples,
    report_inputs,
)
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.contamination import ContaminationSummary
from near_dedup_core.errors import NearDedupError
from near_dedup_core.fsutil import (
    CHECKSUMS,
    atomic_dir,
    require_new_output_outside,
    sha256_file,
    verify_checksums,
    write_checksums,
)
from near_dedup_core.package import load_package
from near_dedup_core.progress import Progress, pause_point
from near_dedup_core.report import (
    ReportManifest,
    ReportSummary,
    report_manifest,
    verify_report,
)
from near_dedup_core.site import model, pages, selection
from near_dedup_core.site.companions import verify_against, verify_contamination_of
from near_dedup_core.site.diffs import submit as submit_diff_pages
from near_dedup_core.site.model import SiteData
from near_dedup_core.site.render import HERE, Writer
from near_dedup_core.site.selection import DiffItem
from near_dedup_core.wording import count
from near_dedup_core.workers import choose_executor, stop_at_once

#: Worker processes for pools of more than `POOL_SAMPLES` samples: one reads the input
#: packages while the report is verified, then both write the search data (smaller pools are
#: done in this process: no start-up to pay).
WORKERS = 2
POOL_SAMPLES = 50_000


@dataclass
class SiteResult:
    output: Path | str  # a local folder, or the URL it was published to
    files: int
    samples: int
    clusters: int
    cluster_pages: int
    diffs: int
    notes: list[str]

    def summary(self) -> str:
        return (f"site {self.output}: {count(self.files, 'file')}; "
                f"{count(self.samples, 'sample')} searchable, {count(self.clusters, 'cluster')} "
                f"({self.cluster_pages:,} with a page), {count(self.diffs, 'text diff')}; "
                f"open {self.output}/index.html")


def _override_inputs(manifest: ReportManifest, paths: Sequence[Path]) -> ReportManifest:
    """The manifest with ``inputs[].path`` replaced by the given package folders (matched by
    package id; the manifest sha256 must be the one the report recorded)."""
    recorded = {i.package_id: i for i in manifest.inputs}
    moved = {}
    for path in paths:
        pkg = load_package(path)
        item = recorded.get(pkg.package_id)
        if item is None:
            raise NearDedupError(f"package {pkg.package_id} at {path} is not an input of the "
                                 f"report (inputs: {', '.join(sorted(recorded))})")
        if pkg.manifest_sha256 != item.manifest_sha256:
            raise NearDedupError(f"package {pkg.package_id} at {path} has manifest sha256 "
                                 f"{pkg.manifest_sha256[:12]}…, the report recorded "
                                 f"{item.manifest_sha256[:12]}…")
        moved[pkg.package_id] = str(path)
    return manifest.model_copy(update={"inputs": [
        i.model_copy(update={"path": moved.get(i.package_id, i.path)})
        for i in manifest.inputs]})


#: What `report html` does after each of its stages, as its progress shows it.
STAGES = ("report read; reading the input packages' domains", "reading the relations",
          "reading the texts of the diffs", "writing the pages", "waiting for the diff pages",
          "writing checksums.sha256")


def build_site(report: str | Path, output: str | Path, *, against: str | Path | None = None,
               contamination: str | Path | None = None,
               inputs: Sequence[str | Path] = (), progress: bool = False) -> SiteResult:
    """Write the static site of ``report`` into the new folder ``output`` (``progress``:
    its stages on stderr, `STAGES`).

    A large report is verified by a worker process while this one builds the site from its
    own plain reading of the files (`_verify_and_read`); the site's folder appears only once
    the report verified, and a report that does not verify is refused with the verifier's
    problem, whatever reading it as a verified one ran into meanwhile."""
    report, output = Path(report), Path(output)
    stages = Progress("report html", len(STAGES), enabled=progress)
    with ExitStack() as stack:
        summary, packages, shard_codes, pool, verified = _verify_and_read(report, inputs, stack)
        stages.step(STAGES[0])
        try:
            site = _build(report, output, summary, packages, shard_codes, pool, verified,
                          against, contamination, inputs, stages)
            stages.finish()
            return site
        except Exception:
            if verified is not None:
                verified.result()  # the verifier's problem first
            raise


def _build(report: Path, output: Path, summary: ReportSummary,
           packages: dict[str, InputPackage],
           shard_codes: dict[tuple[str, str], tuple[list[str], array, bool]], pool: Executor,
           verified: Future | None, against: str | Path | None,
           contamination: str | Path | None, inputs: Sequence[str | Path],
           stages: Progress) -> SiteResult:
    manifest = summary.model
    if inputs:
        manifest = _override_inputs(manifest, [Path(p) for p in inputs])
    old_summary = verify_against(against) if against is not None else None
    contam = (verify_contamination_of(contamination, report, manifest)
              if contamination is not None else None)
    guarded = [report, *(Path(i.path) for i in manifest.inputs)]
    guarded += [Path(p) for p in (against, contamination) if p is not None]
    require_new_output_outside(output, guarded)

    domains = model.line_domains(report, summary, packages, shard_codes)
    counts = model.count_samples(summary, domains)
    stages.step(STAGES[1])
    relations = model.read_relations(report, summary.samples)
    stages.step(STAGES[2])
    data = SiteData(report, summary.model, summary, packages, domains, relations)
    config = manifest.config
    notes = [p.problem for p in packages.values() if p.problem]

    selection.choose_cluster_pages(data)
    inline, paged = selection.diff_items(data)
    nav = [("index.html", "Overview"), ("clusters/index.html", "Clusters"),
           ("guard/index.html", "Guard"), ("sources/index.html", "Per source"),
           ("search.html", "Find a sample")]
    if against is not None:
        nav.append(("changes/index.html", "Changes"))
    if contam is not None:
        nav.append(("contamination/index.html", "Contamination"))
    base = {"nav": nav, "report_name": report.name, "version": __version__,
            "manifest": manifest, "fingerprint": manifest.config_fingerprint}

    with atomic_dir(output) as tmp:
        diff_pages, diff_tasks = submit_diff_pages(tmp, data, base, paged, pool)
        try:
            w = Writer(tmp, base)
            pause_point("site-pages")
            diffs, computed = _write_pages(w, data, config, inline, diff_pages, diff_tasks,
                                           counts, notes, pool, against, old_summary, contam,
                                           domains, stages)
        except BaseException as exc:
            for f in diff_tasks:  # nothing may still write into the folder being removed
                f.cancel()
            if isinstance(exc, Exception):
                wait(diff_tasks)
            else:  # stopped (SIGTERM, Ctrl-C): the workers are killed, not waited for
                stop_at_once(pool)
            raise
        if verified is not None:
            verified.result()
        stages.step(STAGES[5])
        write_checksums(tmp, w.digests)
        files = sum(1 for p in tmp.rglob("*") if p.is_file())
    return SiteResult(output, files, len(summary.samples), len(relations.clusters),
                      sum(c.page for c in relations.clusters), len(diffs) + computed, notes)


def _write_pages(w: Writer, data: SiteData, config: NearDedupConfig,
                 inline: list[DiffItem], diff_pages: dict[Key, str], diff_tasks: list[Future],
                 counts: ReportCounts, notes: list[str], pool: Executor,
                 against: str | Path | None, old_summary: ReportSummary | None,
                 contam: ContaminationSummary | None, domains: Domains,
                 stages: Progress) -> tuple[dict[Key, dict], int]:
    """Every page but the diff pages (written by ``diff_tasks``, whose files' digests join
    the writer's); returns the diffs of the cluster pages and how many the tasks computed."""
    report, summary, relations = data.report, data.summary, data.relations
    guard_pairs = [r for r in relations.blocked if not r.history_only][:model.MAX_GUARD_TEXTS]
    need: set[Key] = {k for it in inline for k in (it.sample, it.kept)}
    for r in guard_pairs:
        need.add(r.sample.key)
        if r.match.key is not None:
            need.add(r.match.key)
    texts = read_samples(report, data.inputs, model.locate(report, summary, need)) \
        if need else {}
    data.texts = texts
    diffs = selection.diffs(inline, texts)
    guard_rows = selection.guard_rows(guard_pairs, texts, config, data)
    stages.step(STAGES[3])

    previous: ReportCounts | None = None
    changes = None
    if against is not None and old_summary is not None:
        old_domains = report_domains(against, old_summary.model)
        changes = diff_reports(against, report, old_domains=old_domains, new_domains=domains)
        previous = count_report(Path(against), old_domains)
        notes += changes.notes
    findings = rate_problems(counts, previous, DEFAULT_MAX_EXCLUSION_RATE,
                             DEFAULT_MAX_RATE_JUMP)

    for name in ("site.css", "search.js"):
        w.raw(f"static/{name}", (HERE / "static" / name).read_bytes())
    finish_search = pages.search.write(w, data, diffs, diff_pages, guard_rows, pool)
    pages.overview.write(w, data, counts, findings, previous is not None, notes)
    pages.clusters.write(w, data, inline, diffs, diff_pages)
    pages.guard.write(w, data, guard_rows)
    pages.sources.write(w, data, counts)
    finish_search()
    if changes is not None:
        pages.changes.write(w, changes, Path(against))  # type: ignore[arg-type]
    if contam is not None:
        pages.contamination.write(w, contam, report)
    stages.step(STAGES[4])
    computed = 0
    for f in diff_tasks:
        digests, n = f.result()
        w.digests.update(digests)
        computed += n
    return diffs, computed


def _verify_and_read(report: Path, inputs: Sequence[str | Path], stack: ExitStack
                     ) -> tuple[ReportSummary, dict[str, InputPackage],
                                dict[tuple[str, str], tuple[list[str], array, bool]],
                                Executor, Future | None]:
    """The report's record of every sample, its input packages, every data file's domains
    (`model.shard_domains`), the executor of the build (entered on ``stack``) and, for a
    large report, the future of its verification.

    A small report is verified here first (`report.verify_report`), then its packages are
    read. A large one is verified by one worker process (`model.verify`) while the other
    reads the packages and this one reads decisions.jsonl as plain JSON
    (`model.read_decisions`); the caller waits for the verification before the site
    appears."""
    try:
        recorded, raw = report_manifest(report)
        manifest = _override_inputs(recorded, [Path(p) for p in inputs]) if inputs else recorded
    except NearDedupError:  # verify_report names the problem in its own order
        manifest = None
    summary = None
    if manifest is None:
        summary = verify_report(report)
        manifest = summary.model
        if inputs:
            manifest = _override_inputs(manifest, [Path(p) for p in inputs])
    packages = report_inputs(manifest, report)
    files = [(pkg, file) for pkg in packages.values() if pkg.available for file in pkg.files]
    records = sum(i.records for i in manifest.inputs)
    executor = choose_executor("local", WORKERS).for_work(records, POOL_SAMPLES)
    pool = stack.enter_context(executor.start())
    verified = None
    if summary is None and executor.in_process:
        summary = verify_report(report)
    if summary is not None:
        futures = [pool.submit(model.shard_domains, pkg, file) for pkg, file in files]
        shards = {(pkg.package_id, file): f.result()
                  for (pkg, file), f in zip(files, futures, strict=True)}
        return summary, packages, shards, pool, verified

    def start() -> tuple[Future, list[Future]]:
        # the first submit waits until the pool's server has started and imported its
        # modules: a thread waits for it while this one reads decisions.jsonl
        return (pool.submit(model.verify, report),
                [pool.submit(model.shard_domains, pkg, file) for pkg, file in files])

    with ThreadPoolExecutor(1) as starter:
        started = starter.submit(start)
        try:
            samples = model.read_decisions(report)
        except Exception:
            started.result()[0].result()  # the verifier's problem first
            raise
        verified, futures = started.result()
    try:
        summary = ReportSummary(path=report, counts=raw["counts"], manifest=raw,
                                model=recorded, samples=samples)
        shards = {(pkg.package_id, file): f.result()
                  for (pkg, file), f in zip(files, futures, strict=True)}
    except Exception:
        verified.result()  # the verifier's problem first
        raise
    return summary, packages, shards, pool, verified


def site_of(site: str | Path, report: str | Path) -> bool:
    """Whether the folder ``site`` is an intact site (its checksums pass) built from this
    report (the sha256 of the report's checksums.sha256 recorded in ``data/meta.js``)."""
    site = Path(site)
    verify_checksums(site, "site")
    text = (site / "data" / "meta.js").read_text(encoding="utf-8")
    meta = orjson.loads(text[text.index("{"):text.rindex("}") + 1])
    return bool(meta.get("report_checksums_sha256") == sha256_file(Path(report) / CHECKSUMS))
