"""The search page (``search.html``) and its data: one ``<script>`` shard of sample records
per `SHARD_SAMPLES` samples, loaded on demand, and ``data/meta.js``."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import Executor, Future

import orjson

from near_dedup_core.audit.explain import explain_why
from near_dedup_core.audit.sources import Key
from near_dedup_core.fsutil import CHECKSUMS, sha256_file
from near_dedup_core.report import SampleDecision
from near_dedup_core.site import model, views
from near_dedup_core.site.model import SiteData
from near_dedup_core.site.render import Writer

#: Samples per search-data shard (a shard is one ``<script>`` file loaded on demand).
SHARD_SAMPLES = 2_000
#: Relations and excluded samples kept per sample in the search data (counts say how many).
RECORD_LIST = 200
#: decisions.jsonl lines per task of the search data (`model.search_part`).
SEARCH_TASK = 100_000


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


def write(w: Writer, data: SiteData, diffs: dict[Key, dict], diff_pages: dict[Key, str],
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
