"""`report html`: a frozen report as a static site (see ``docs/site.md``).

Built from the report's files and its input packages only, like `report explain`; the report
must verify (`report.verify_report`) and is only read. The folder is written atomically
(`fsutil.atomic_dir`) with its own ``checksums.sha256``; the same report, packages and options
give the same bytes (no timestamps, everything sorted, numbers formatted explicitly).
"""

from __future__ import annotations

from array import array
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import orjson

from near_dedup_core import __version__
from near_dedup_core.audit.diff import CHANGES, CONTENT_LISTS, LISTS, ReportDiff, diff_reports
from near_dedup_core.audit.explain import explain_why
from near_dedup_core.audit.rates import (
    DEFAULT_MAX_EXCLUSION_RATE,
    DEFAULT_MAX_RATE_JUMP,
    ReportCounts,
    Tally,
    count_report,
    rate_problems,
    report_domains,
)
from near_dedup_core.audit.sources import (
    Domains,
    InputPackage,
    Key,
    SampleText,
    input_packages,
    read_lines,
    read_samples,
    report_inputs,
)
from near_dedup_core.compare import compared_text
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.contamination import ContaminationSummary, pair_lines
from near_dedup_core.contamination.report import EvalRef, Summary
from near_dedup_core.errors import NearDedupError
from near_dedup_core.fsutil import (
    CHECKSUMS,
    atomic_dir,
    require_new_output_outside,
    sha256_file,
    verify_checksums,
    write_checksums,
)
from near_dedup_core.normalize import normalize
from near_dedup_core.package import load_package
from near_dedup_core.progress import Progress
from near_dedup_core.report import (
    REASONS,
    OriginRow,
    ReportManifest,
    ReportSummary,
    SampleDecision,
    report_manifest,
    verify_report,
)
from near_dedup_core.site import model, selection, views
from near_dedup_core.site.diffs import submit as submit_diff_pages
from near_dedup_core.site.model import Cluster, SiteData
from near_dedup_core.site.render import HERE, Writer
from near_dedup_core.site.selection import DiffItem
from near_dedup_core.wording import count
from near_dedup_core.workers import choose_executor

#: Samples per search-data shard (a shard is one ``<script>`` file loaded on demand).
SHARD_SAMPLES = 2_000
CLUSTERS_PER_PAGE = 100
GUARD_PER_PAGE = 50
CHANGES_PER_PAGE = 500
CONTAMINATION_PER_PAGE = 50
#: Contaminated pairs shown with the training text and the item's span highlighted.
MAX_CONTAMINATION_TEXTS = 500
#: Excluded samples listed per source page.
SOURCE_EXCLUSIONS = 50
#: Relations and excluded samples kept per sample in the search data (counts say how many).
RECORD_LIST = 200
#: Worker processes for pools of more than `POOL_SAMPLES` samples: one reads the input
#: packages while the report is verified, then both write the search data (smaller pools are
#: done in this process: no start-up to pay).
WORKERS = 2
POOL_SAMPLES = 50_000
#: decisions.jsonl lines per task of the search data (`model.search_part`).
SEARCH_TASK = 100_000


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


def _name(key: Key | None) -> str:
    return "-" if key is None else f"{key[0]}/{key[1]}"


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
    old_summary = verify_report(Path(against)) if against is not None else None
    contam = None
    if contamination is not None:
        from near_dedup_core.contamination import is_contamination_report, verify_contamination

        if not is_contamination_report(Path(contamination)):
            raise NearDedupError(f"contamination report {contamination}: manifest.json is not "
                                 f"a contamination report's")
        contam = verify_contamination(Path(contamination))
    manifest = summary.model
    if inputs:
        manifest = _override_inputs(manifest, [Path(p) for p in inputs])
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
            diffs, computed = _write_pages(w, data, config, inline, diff_pages, diff_tasks,
                                           counts, notes, pool, against, old_summary, contam,
                                           domains, stages)
        except BaseException:
            for f in diff_tasks:  # nothing may still write into the folder being removed
                f.cancel()
            wait(diff_tasks)
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
    finish_search = _search(w, data, diffs, diff_pages, guard_rows, pool)
    _overview(w, data, counts, findings, previous is not None, notes)
    _clusters(w, data, inline, diffs, diff_pages)
    _guard(w, data, guard_rows)
    _sources(w, data, counts)
    finish_search()
    if changes is not None:
        _changes(w, changes, Path(against))  # type: ignore[arg-type]
    if contam is not None:
        _contamination(w, contam, report)
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


# --------------------------------------------------------------------------- pages


def _overview(w: Writer, data: SiteData, counts: ReportCounts, findings, compared: bool,
              notes: list[str]) -> None:
    m = data.manifest
    c = m.counts
    split_rows = [(s, v.keep, v.exclude) for s, v in sorted(c.by_split.items())]
    reason_rows = sorted(c.by_reason.items())

    def tally_rows(table: dict) -> list[tuple[str, int, int, float]]:
        items = sorted(table.items(), key=lambda kv: (kv[0] is None, kv[0] or ""))
        return [("(unknown)" if k is None else str(k), t.keep, t.exclude, t.rate)
                for k, t in items]

    domain_rows = tally_rows(counts.by_domain)
    package_rows = tally_rows(counts.by_package)
    threshold = m.config.threshold
    w.page("index.html", "overview.html", title="Overview", counts=c,
           split_rows=split_rows, split_chart=views.bar_chart(split_rows),
           reason_rows=reason_rows,
           reason_chart=views.bar_chart([(r, n if REASONS.get(r, ("keep",))[0] == "keep"
                                          else 0, n if REASONS.get(r, ("keep",))[0] ==
                                          "exclude" else 0) for r, n in reason_rows]),
           domain_rows=domain_rows,
           domain_chart=views.bar_chart([r[:3] for r in domain_rows]),
           package_rows=package_rows,
           package_chart=views.bar_chart([r[:3] for r in package_rows]),
           hist=views.histogram_chart(data.relations.near_jaccards, threshold),
           manifest_hist=sorted(c.near_relations_jaccard.items()),
           threshold=threshold, findings=findings, compared=compared,
           max_rate=DEFAULT_MAX_EXCLUSION_RATE, max_jump=DEFAULT_MAX_RATE_JUMP,
           inputs=data.inputs,
           config_rows=sorted(m.config.model_dump(mode="json").items()), notes=notes,
           clusters=len(data.relations.clusters),
           history_only=data.relations.history_only)


def _member_rows(data: SiteData, c: Cluster) -> list[dict]:
    rows = []
    for k in c.members[:model.CLUSTER_MEMBERS]:
        d = data.decision(k)
        rows.append({"key": k, "split": d.split if d else None,
                     "domain": data.domain(k), "decision": d.decision if d else None,
                     "reason": d.reason if d else None, "kept": d.kept if d else None,
                     "jaccard": d.jaccard if d else None})
    return rows


def _cluster_notes(data: SiteData, c: Cluster) -> list[str]:
    """Why a member that matches another one was kept anyway (no transitivity, the guard)."""
    linked: dict[Key, list[tuple[Key, str | None]]] = defaultdict(list)
    for e in c.edges:  # a sample's matches with earlier samples decide it
        linked[e.a].append((e.b, e.blocked_by))
    out = []
    for k in c.members[:model.CLUSTER_MEMBERS]:
        d = data.decision(k)
        if d is None or d.decision != "keep":
            continue
        partners = linked[k]
        if d.reason == "match_not_kept":
            excluded = [p for p, b in partners if b is None and (pd := data.decision(p))
                        and pd.decision == "exclude"]
            for p in excluded:
                pd = data.decision(p)
                target = pd.kept if pd else None
                direct = any(q == target for q, _ in partners)
                out.append(f"{_name(k)} is kept although it matches {_name(p)}: {_name(p)} "
                           f"was itself excluded in favour of {_name(target)}, and "
                           f"{_name(k)} {'also matches' if direct else 'does not match'} "
                           f"{_name(target)} (matches are not transitive: A≈B, B≈C, "
                           f"A≉C keeps A and C)")
        elif d.reason == "guard_blocked":
            blocked = [p for p, b in partners if b is not None]
            out.append(f"{_name(k)} is kept: its matches ({', '.join(map(_name, blocked))}) "
                       f"differ in numbers or units (the guard keeps them apart)")
    return out


def _matrix(data: SiteData, c: Cluster) -> dict | None:
    if c.size > model.MATRIX_MEMBERS:
        return None
    jac: dict[tuple[Key, Key], tuple[float, str | None]] = {}
    for e in c.edges:
        jac[(e.a, e.b)] = jac[(e.b, e.a)] = (e.jaccard, e.blocked_by)
    node = {k: d.node if (d := data.decision(k)) is not None else None for k in c.members}

    def cell(a: Key, b: Key) -> object:
        if a == b:
            return None
        if (a, b) in jac:
            return jac[(a, b)]
        return "same" if node[a] is not None and node[a] == node[b] else "none"

    cells = [[cell(a, b) for b in c.members] for a in c.members]
    return {"members": c.members, "cells": cells}


def _clusters(w: Writer, data: SiteData, inline: list[DiffItem], diffs: dict[Key, dict],
              diff_pages: dict[Key, str]) -> None:
    clusters = data.relations.clusters
    total = views.pages(len(clusters), CLUSTERS_PER_PAGE)
    with_page = sum(c.page for c in clusters)
    first_diff: dict[int, str] = {}  # a cluster's first diff on the diff pages
    for c in clusters:
        for k in c.members:
            where_ = diff_pages.get(k)
            if where_ is not None:
                first_diff[c.number] = where_
                break
    for p in range(1, total + 1):
        chunk = clusters[(p - 1) * CLUSTERS_PER_PAGE:p * CLUSTERS_PER_PAGE]
        rows = []
        for c in chunk:
            decided = [data.decision(k) for k in c.members]
            rows.append({"c": c, "kept": [k for k, d in zip(c.members, decided, strict=True)
                                          if d and d.decision == "keep"][:3],
                         "excluded": sum(1 for d in decided if d and d.decision == "exclude"),
                         "packages": sorted({k[0] for k in c.members}),
                         "blocked": sum(1 for e in c.edges if e.blocked_by),
                         "diffs": first_diff.get(c.number)})
        w.page("clusters/index.html" if p == 1 else f"clusters/page-{p}.html", "clusters.html", title="Clusters", rows=rows, page=p, pages=total,
               clusters=len(clusters), with_page=with_page)
    for c in clusters:
        if not c.page:
            continue
        members = _member_rows(data, c)
        shown = [{**r, "diff": diffs.get(r["key"])} for r in members
                 if r["kept"] is not None]
        w.page(f"clusters/c-{c.number}.html", "cluster.html", title=f"Cluster {c.number}",
               c=c, members=members, edges=c.edges[:model.CLUSTER_MEMBERS * 2],
               notes=_cluster_notes(data, c), matrix=_matrix(data, c), shown=shown,
               more_diffs=first_diff.get(c.number))


def _guard(w: Writer, data: SiteData, rows: list[dict]) -> None:
    blocked = data.relations.blocked
    total = views.pages(len(rows), GUARD_PER_PAGE)
    by_rule: dict[str, int] = defaultdict(int)
    for r in blocked:
        if r.blocked_by is not None:
            by_rule[r.blocked_by] += 1
    history = sum(1 for r in blocked if r.history_only)
    rules = sorted(by_rule.items())
    for p in range(1, total + 1):
        w.page("guard/index.html" if p == 1 else f"guard/page-{p}.html", "guard.html",
               title="Guard", rows=rows[(p - 1) * GUARD_PER_PAGE:p * GUARD_PER_PAGE],
               page=p, pages=total, blocked=len(blocked), shown=len(rows),
               history=history, by_rule=rules, cluster_of=data.relations.cluster_of,
               clusters=data.relations.clusters)


def _sources(w: Writer, data: SiteData, counts: ReportCounts) -> None:
    tables: dict[str, dict[str | None, Tally]] = {
        "package": {k: v for k, v in counts.by_package.items()},
        "domain": dict(counts.by_domain)}
    groups: dict[tuple[str, str | None], list] = {}
    for kind, table in tables.items():
        for name in sorted(table, key=lambda n: (n is None, n or "")):
            groups[(kind, name)] = []
    top: dict[tuple[str, str | None], list[Cluster]] = defaultdict(list)
    for c in data.relations.clusters:
        for s in {("package", k[0]) for k in c.members} | \
                {("domain", data.domain(k)) for k in c.members}:
            if len(top[s]) < 10:
                top[s].append(c)
    excluded: dict[tuple[str, str | None], list] = defaultdict(list)
    for k, d in data.summary.samples.items():
        if d.decision != "exclude":
            continue
        for s in (("package", k[0]), ("domain", data.domain(k))):
            if len(excluded[s]) < SOURCE_EXCLUSIONS:
                excluded[s].append((k, d))
    files = {}
    for i, (kind, name) in enumerate(groups, 1):
        files[(kind, name)] = f"{kind}-{i}.html"
    rows = {kind: [(name, table[name], files[(kind, name)])
                   for (k2, name) in groups if k2 == kind]
            for kind, table in tables.items()}
    w.page("sources/index.html", "sources.html", title="Per source", rows=rows,
           charts={kind: views.bar_chart([("(unknown)" if n is None else str(n), t.keep,
                                           t.exclude) for n, t, _ in r])
                   for kind, r in rows.items()})
    for (kind, name), fname in files.items():
        w.page(f"sources/{fname}", "source.html", title=f"{kind} {name}", kind=kind,
               name=name, tally=tables[kind][name],
               clusters=top[(kind, name)], excluded=excluded[(kind, name)],
               limit=SOURCE_EXCLUSIONS, data=data)


def _partner(r: dict, data: SiteData, content: dict[Key, str]) -> dict:
    """A relation as `report explain` lists it: the partner's content and its own decision,
    reason and kept sample."""
    r = {**r, "partner": dict(r["partner"])}
    pk = model.rel_ref(r["partner"])
    if r["listed_as"] == "match" and pk is not None:
        r["partner"]["content_id"] = content.get(pk)
    pd = data.decision(pk) if pk is not None else None
    r["partner_decision"] = pd.decision if pd is not None else None
    r["partner_reason"] = pd.reason if pd is not None else None
    r["partner_kept"] = ({"package_id": pd.kept[0], "sample_id": pd.kept[1]}
                         if pd is not None and pd.kept is not None else None)
    return r


def _tail(key: Key, d: SampleDecision, data: SiteData, rels: list[dict],
          content: dict[Key, str], excluded: list[Key], diffs: dict[Key, dict],
          diff_pages: dict[Key, str], guard: dict[Key, list[dict]]) -> dict:
    """What a sample's search record holds after its decisions.jsonl fields, origin and
    domain (`model.search_part`): ``why`` (as `report explain` says it, from all its
    relations), its relations with each partner's own decision, the samples excluded in its
    favour, its cluster, diff and guard rows where it has any."""
    listed = [_partner(r, data, content) for r in rels]
    rec: dict[str, object] = {"why": explain_why(model.decision_row(key, d), listed)}
    if listed:
        rec["relations"] = listed[:RECORD_LIST]
        rec["relations_total"] = len(listed)
    if excluded:
        rows = []
        for k in excluded[:RECORD_LIST]:
            x = data.decision(k)
            rows.append({"package_id": k[0], "sample_id": k[1], "split": x.split,
                         "reason": x.reason, "jaccard": x.jaccard})
        rec["excluded_because_of_it"] = rows
        rec["excluded_total"] = len(excluded)
    c = data.relations.cluster_of.get(key)
    if c is not None:
        rec["cluster"] = c
        if data.relations.clusters[c - 1].page:
            rec["cluster_page"] = f"clusters/c-{c}.html"
    diff = diffs.get(key)
    if diff is not None:
        p = diff["partner"]
        rec["diff"] = {"partner": {"package_id": p[0], "sample_id": p[1]},
                       "spans": len(diff["spans"]), "lines": diff["lines"],
                       "page": f"clusters/c-{c}.html#{views.anchor(key)}"}
    elif key in diff_pages and d.kept is not None:  # computed by a diff page's task
        rec["diff"] = {"partner": {"package_id": d.kept[0], "sample_id": d.kept[1]},
                       "page": diff_pages[key]}
    if key in guard:
        rec["guard"] = guard[key]
    return rec


def _search(w: Writer, data: SiteData, diffs: dict[Key, dict], diff_pages: dict[Key, str],
            guard_rows: list[dict], pool: Executor) -> Callable[[], None]:
    """Search data: one ``<script>`` file per shard of samples, loaded on demand. The records
    of samples with relations are made here (`_tail`); all of them are written by
    `model.search_part`, a range of decisions.jsonl lines per task, on ``pool`` (two worker
    processes for a large report) while this process renders the other pages. Returns what finishes the shard files (in line order, whatever the order
    the tasks ran in)."""
    samples = data.summary.samples
    n = max(1, -(-len(samples) // SHARD_SAMPLES))
    wanted = {(r["partner"]["package_id"], r["partner"]["sample_id"])
              for rels in data.relations.by_sample.values() for r in rels
              if r["listed_as"] == "match"}
    content = model.content_ids(data.report, data.summary, wanted)
    excluded = model.excluded_by(data.summary)
    guard: dict[Key, list[dict]] = defaultdict(list)
    for g in guard_rows:
        if not g["available"]:
            continue
        for me, other, side, oside in ((g["sample"], g["match"], "sample", "match"),
                                       (g["match"], g["sample"], "match", "sample")):
            guard[me].append({"partner": {"package_id": other[0], "sample_id": other[1]},
                              "blocked_by": g["blocked_by"], "jaccard": g["jaccard"],
                              "sequences": {"sample": {"numbers": g["numbers"][side],
                                                       "units": g["units"][side]},
                                            "partner": {"numbers": g["numbers"][oside],
                                                        "units": g["units"][oside]}},
                              "recomputed_blocked_by": g["recomputed"]})
    empty: list[dict] = []
    ranges = [(a, min(a + SEARCH_TASK, len(samples)))
              for a in range(0, max(len(samples), 1), SEARCH_TASK)]
    names, codes = model.domain_codes(data.domains, data.summary)
    folder = w.out / "data" / "samples"
    folder.mkdir(parents=True, exist_ok=True)
    parts = [folder / f".part-{k:05d}" for k in range(len(ranges))]
    futures: list[Future] = []

    def submit(upto: int, tails: dict[int, bytes]) -> None:
        """Hand the ranges before ``upto`` to the pool, each as soon as its records with
        relations are made (a worker starts on it while this process makes the next)."""
        while len(futures) < upto:
            k = len(futures)
            a, b = ranges[k]
            futures.append(pool.submit(model.search_part, data.report, a, b, n, names,
                                       codes[a:b], {line: tails.pop(line) for line in
                                                    [x for x in tails if a < x <= b]},
                                       parts[k]))

    tails: dict[int, bytes] = {}
    related = sorted((d.line, key) for key in {*data.relations.by_sample, *excluded, *diffs,
                                               *diff_pages, *guard}
                     if (d := samples.get(key)) is not None)
    for line, key in related:
        submit((line - 1) // SEARCH_TASK, tails)
        tails[line] = orjson.dumps(_tail(key, samples[key], data,
                                         data.relations.by_sample.get(key, empty), content,
                                         excluded.get(key, []), diffs, diff_pages,
                                         guard))
    submit(len(ranges), tails)

    def finish() -> None:
        lengths = [f.result() for f in futures]
        files = [open(part, "rb") for part in parts]  # noqa: SIM115 (closed below)
        try:
            for i in range(n):
                body = b"".join(fh.read(lengths[k][i]) for k, fh in enumerate(files))
                w.raw(f"data/samples/{i:05d}.js", b"NEAR_DEDUP_SHARD(" + str(i).encode() +
                      b", {\n" + body.removesuffix(b",\n") + b"\n});\n")
        finally:
            for fh in files:
                fh.close()
        for part in parts:
            part.unlink()
        meta = {"shards": n, "packages": [i.package_id for i in data.manifest.inputs],
                "report": data.report.name,
                "report_checksums_sha256": sha256_file(data.report / CHECKSUMS)}
        w.raw("data/meta.js", b"var NEAR_DEDUP_META = " +
              orjson.dumps(meta, option=orjson.OPT_SORT_KEYS) + b";\n")
        w.page("search.html", "search.html", title="Find a sample",
               packages=meta["packages"], shards=n)

    return finish


def _changes(w: Writer, diff: ReportDiff, old: Path) -> None:
    lists = {}
    for name in LISTS:
        items = diff.lists[name]
        total = views.pages(len(items), CHANGES_PER_PAGE)
        lists[name] = {"count": len(items), "pages": total}
        for p in range(2, total + 1):
            w.page(f"changes/{name}-{p}.html", "change_list.html", title=name.replace("_", " "),
                   name=name, items=items[(p - 1) * CHANGES_PER_PAGE:p * CHANGES_PER_PAGE],
                   page=p, pages=total)
    contents = {}
    for name in CONTENT_LISTS:  # the contents matched across the two days (report diff)
        items = diff.contents[name]
        total = views.pages(len(items), CHANGES_PER_PAGE)
        contents[name] = {"count": len(items), "pages": total}
        for p in range(2, total + 1):
            w.page(f"changes/contents-{name}-{p}.html", "contents_list.html",
                   title=f"{name.replace('_', ' ')} contents", name=name,
                   items=items[(p - 1) * CHANGES_PER_PAGE:p * CHANGES_PER_PAGE],
                   page=p, pages=total)
    w.page("changes/index.html", "changes.html", title="Changes", d=diff, old_name=old.name,
           lists=lists, first={n: diff.lists[n][:CHANGES_PER_PAGE] for n in LISTS},
           list_names=LISTS, change_names=CHANGES, contents=contents,
           contents_first={n: diff.contents[n][:CHANGES_PER_PAGE] for n in CONTENT_LISTS},
           content_names=CONTENT_LISTS)


def _contamination(w: Writer, contam: ContaminationSummary, report: Path) -> None:
    path, manifest = contam.path, contam.model
    lines = list(pair_lines(path))
    summary = Summary.model_validate_json((path / "summary.json").read_bytes())
    pool = input_packages(manifest.inputs, path)
    evals = input_packages(manifest.evals, path)
    shown = lines[:MAX_CONTAMINATION_TEXTS]
    t_orig = {(t.package_id, t.sample_id): OriginRow(
        package_id=t.package_id, sample_id=t.sample_id, split=t.split, file=t.file,
        line=t.line, source=None) for t in (r.training for r in shown)}
    e_orig = {(r.eval.package_id, r.eval.sample_id): r.eval for r in shown}
    t_texts = read_samples(report, pool, t_orig) if t_orig else {}
    e_texts = _eval_texts(evals, e_orig)
    rows = []
    for i, r in enumerate(lines):
        row: dict[str, object] = {"r": r}
        if i < MAX_CONTAMINATION_TEXTS:
            t = t_texts.get((r.training.package_id, r.training.sample_id))
            if t is not None:
                s, e = r.span.start, r.span.end
                text = t.normalized
                row["training"] = (views.collapse(text[:s], True, False) if s else []) + \
                    [("span", text[s:e])] + (views.collapse(text[e:], False, True)
                                             if e < len(text) else [])
            item = e_texts.get((r.eval.package_id, r.eval.sample_id))
            row["item"] = item.normalized if item is not None else None
        rows.append(row)
    total = views.pages(len(rows), CONTAMINATION_PER_PAGE)
    notes = [p.problem for p in (*pool.values(), *evals.values()) if p.problem]
    for p in range(1, total + 1):
        w.page("contamination/index.html" if p == 1 else f"contamination/page-{p}.html",
               "contamination.html", title="Contamination", name=path.name,
               summary=summary, counts=manifest.counts, page=p, pages=total,
               rows=rows[(p - 1) * CONTAMINATION_PER_PAGE:p * CONTAMINATION_PER_PAGE],
               threshold=manifest.config.get("contamination_threshold"), notes=notes,
               limit=MAX_CONTAMINATION_TEXTS)


def _eval_texts(evals: dict[str, InputPackage], origins: dict[Key, EvalRef]
                ) -> dict[Key, SampleText]:
    """Eval items' compared texts, read from their packages at the reported file and line."""
    out: dict[Key, SampleText] = {}
    by_file: dict[tuple[str, str], dict[int, Key]] = defaultdict(dict)
    for k, o in origins.items():
        pkg = evals.get(k[0])
        if pkg is not None and pkg.available:
            by_file[(k[0], o.file)][o.line] = k
    for (pid, file), wanted in sorted(by_file.items()):
        for n, rec in read_lines(evals[pid], file, set(wanted)).items():
            if isinstance(rec.get("ref"), dict):
                continue  # a ref's text is in another package: not shown
            text = compared_text(evals[pid].kind, rec)
            out[wanted[n]] = SampleText(wanted[n], file, n, text, normalize(text),
                                        rec.get("domain"))
    return out

