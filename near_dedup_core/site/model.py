"""What the site shows, read from a verified report and its input packages (never the index).

The report is verified (`report.verify_report`: every line of every file typed and
cross-checked): first, for a small report, whose decisions then come back from the verifier
as one small record per sample; beside the build, in a worker process, for a large one
(`verify`), whose records are read from decisions.jsonl (`read_decisions`) and whose site
appears only once it verified. The counts, clusters and explanations read those records.
The report's lines are read as plain JSON (orjson), each file once more at most:

1. the input packages, once, beside the verifier (`shard_domains`, a worker process): each
   data file's domains, one code per line; with ``origins.jsonl`` (file and line of every
   sample, `line_domains`) every sample's domain as one code per decisions.jsonl line
   (`LineDomains`; a package whose records are ``ref``s is read key by key instead,
   `audit.sources.sample_domains`, as the exclusion-rate check does);
2. ``relations.jsonl``: each sample's relations as `report explain` lists them
   (``listed_as`` sample/match), the connected groups of pool relations (*clusters*,
   union-find over the samples; history-only relations join nothing), the guard-blocked
   pairs, and the exact Jaccard of the near relations for the histogram;
3. ``decisions.jsonl`` with ``origins.jsonl``, a range of lines per task (`search_part`,
   two worker processes for a large report): the per-sample records of the search data,
   with `report explain`'s ``why``; a sample with relations gets the rest (each partner's
   own decision, excluded samples, cluster, diff) from the caller;
4. the texts of the samples shown (`audit.sources.read_samples`): every excluded sample
   and its kept partner (those listed on a cluster's own page by this process, the others
   by the diff pages' tasks, `site.diffs`), and the guard-blocked pairs shown with their
   numbers.

Counts by split, domain and package are `audit.rates.count_report`'s (`count_samples`, from
the verifier's records); the findings are `audit.rates.rate_problems`; text diffs are
`audit.textdiff.changed_spans`.
"""

from __future__ import annotations

from array import array
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import orjson

from near_dedup_core.audit.explain import explain_why
from near_dedup_core.audit.rates import ReportCounts
from near_dedup_core.audit.sources import (
    Domains,
    InputPackage,
    Key,
    SampleText,
    check_shard,
    sample_domains,
    shard_lines,
)
from near_dedup_core.errors import NearDedupError
from near_dedup_core.formats.report import SampleRef
from near_dedup_core.report import (
    DecisionRow,
    OriginRow,
    RelationRow,
    ReportManifest,
    ReportSummary,
    SampleDecision,
    verify_report,
)
from near_dedup_core.site import views

#: Clusters that get a page of their own (largest first), besides the largest few per source.
CLUSTER_PAGES = 400
#: Largest clusters of each package and domain that get a page too.
CLUSTERS_PER_SOURCE = 5
#: Members listed on a cluster page (a larger cluster lists its first ones, by decision order).
CLUSTER_MEMBERS = 200
#: Excluded samples per diff page (those not listed on their cluster's own page).
DIFFS_PER_PAGE = 100
#: Guard-blocked pool pairs shown with both texts and their numbers highlighted.
MAX_GUARD_TEXTS = 600
#: Pairwise Jaccard is shown as a matrix for clusters of at most this many members.
MATRIX_MEMBERS = 12


def rel_ref(ref: dict) -> Key | None:
    """The (package_id, sample_id) of a relation's partner as listed (None: history)."""
    if ref.get("package_id") is None:
        return None
    return (ref["package_id"], ref["sample_id"])


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[Key, Key] = {}

    def find(self, x: Key) -> Key:
        parent = self.parent
        root = x
        while parent.get(root, root) != root:
            root = parent[root]
        while x != root:
            nxt = parent.get(x, x)
            parent[x] = root
            x = nxt
        return root

    def union(self, a: Key, b: Key) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            if rb < ra:
                ra, rb = rb, ra
            self.parent[rb] = ra
            self.parent.setdefault(ra, ra)


@dataclass
class Edge:
    """One pool relation between two samples: ``a`` matched the earlier ``b``."""

    a: Key
    b: Key
    kind: str
    jaccard: float
    blocked_by: str | None


@dataclass
class Cluster:
    number: int
    members: list[Key]
    edges: list[Edge]
    page: bool = False

    @property
    def size(self) -> int:
        return len(self.members)


@dataclass
class Relations:
    """What one pass over relations.jsonl gives."""

    by_sample: dict[Key, list[dict]]
    clusters: list[Cluster]
    cluster_of: dict[Key, int]
    blocked: list[RelationRow]  # every guard-blocked relation of relations.jsonl
    near_jaccards: list[float]  # near relations not blocked by the guard (the manifest's)
    total: int = 0
    history_only: int = 0


def read_relations(report: Path, samples: dict[Key, SampleDecision]) -> Relations:
    """Relations by sample, clusters largest first (ties: earliest member in decision order).

    A sample's relations are listed in relations.jsonl order, as `report explain` lists them
    (its ``why`` reads them in that order). The report is verified (`report.verify_report`
    typed every line and checked every reference), so its lines are read as plain JSON here;
    the fields keep the order of the typed rows (`report.RelationRow`), numbers their type."""
    by_sample: dict[Key, list[dict]] = defaultdict(list)
    uf = _UnionFind()
    edges: list[Edge] = []
    blocked: list[RelationRow] = []
    near: list[float] = []
    total = hist = 0
    with open(report / "relations.jsonl", "rb") as fh:
        for raw in fh:
            r = orjson.loads(raw)
            total += 1
            sample, match = r["sample"], r["match"]
            s = (sample["package_id"], sample["sample_id"])
            m = None if match["package_id"] is None else (match["package_id"],
                                                          match["sample_id"])
            kind, jaccard, history_only, blocked_by = (r["kind"], float(r["jaccard"]),
                                                       r["history_only"], r["blocked_by"])
            common = {"kind": kind, "jaccard": jaccard, "history_only": history_only,
                      "blocked_by": blocked_by,
                      "match_sources": [{"package_id": x["package_id"],
                                         "sample_id": x["sample_id"], "split": x["split"]}
                                        for x in r["match_sources"]]}
            if "takedown" in r:  # a taken-down text: no partner in the pool
                common["takedown"] = {"request_id": r["takedown"]["request_id"],
                                      "item": r["takedown"]["item"]}
            by_sample[s].append({"listed_as": "sample",
                                 "partner": {"content_id": match["content_id"],
                                             "package_id": match["package_id"],
                                             "sample_id": match["sample_id"]}, **common})
            if m is not None:
                by_sample[m].append({"listed_as": "match",
                                     "partner": {"content_id": None, "package_id": s[0],
                                                 "sample_id": s[1]}, **common})
                uf.union(s, m)
                edges.append(Edge(s, m, kind, jaccard, blocked_by))
            if history_only:
                hist += 1
            if blocked_by is not None:
                blocked.append(RelationRow.model_validate(r))
            if kind == "near" and blocked_by is None:
                near.append(jaccard)
    groups: dict[Key, list[Key]] = defaultdict(list)
    for key in uf.parent:
        groups[uf.find(key)].append(key)
    grouped_edges: dict[Key, list[Edge]] = defaultdict(list)
    for e in edges:
        grouped_edges[uf.find(e.a)].append(e)

    def line(k: Key) -> int:
        d = samples.get(k)
        return 0 if d is None else d.line

    ranked = sorted(groups.items(), key=lambda kv: (-len(kv[1]), min(map(line, kv[1]))))
    clusters: list[Cluster] = []
    cluster_of: dict[Key, int] = {}
    for n, (root, members) in enumerate(ranked, 1):
        members.sort(key=line)
        es = grouped_edges[root]
        es.sort(key=lambda e: (line(e.a), line(e.b)))
        clusters.append(Cluster(n, members, es))
        for k in members:
            cluster_of[k] = n
    return Relations(dict(by_sample), clusters, cluster_of, blocked, near, total, hist)


class LineDomains(Domains):
    """The domain of every sample of a verified report: a list of names and one code per
    decisions.jsonl line (a compact array, where a dict would hold a million keys). It
    answers `of` and lists the unavailable packages (`missing`) as `audit.sources.Domains`
    does, so the audit tools take it."""

    def __init__(self, samples: dict[Key, SampleDecision], names: list[str | None],
                 codes: array, missing: list[InputPackage]) -> None:
        super().__init__({}, missing)
        self.samples = samples
        self.names = names
        self.codes = codes
        self.missing = missing

    def of(self, key: Key) -> str | None:
        d = self.samples.get(key)
        return None if d is None else self.names[self.codes[d.line - 1]]


def shard_domains(pkg: InputPackage, file: str) -> tuple[list[str], array, bool]:
    """The domain of every line of one data file of ``pkg`` (checked against the package's
    manifest first): the file's own list of names, one code per line (0: no domain, ``n``:
    the n-th name), and whether a line without a domain is a ``ref`` (whose domain is its
    target's, `audit.sources.sample_domains`). Runs in a worker process."""
    names: dict[str, int] = {}
    codes = array("I")
    refs = False
    path = check_shard(pkg, file)
    try:
        for raw in shard_lines(path):
            data = orjson.loads(raw)
            if "id" not in data:
                raise KeyError("id")
            domain = data.get("domain")
            if domain is None:
                refs = refs or isinstance(data.get("ref"), dict)
                codes.append(0)
            else:
                name = str(domain)
                code = names.get(name)
                if code is None:
                    code = names[name] = len(names) + 1
                codes.append(code)
    except (OSError, EOFError, orjson.JSONDecodeError, KeyError) as exc:
        raise NearDedupError(f"package {pkg.package_id}, {file}: cannot read ({exc})") from None
    return list(names), codes, refs


def line_domains(report: Path, summary: ReportSummary, packages: dict[str, InputPackage],
                 shards: dict[tuple[str, str], tuple[list[str], array, bool]]
                 ) -> Domains:
    """Every sample's domain from the shards' codes (`shard_domains`) and ``origins.jsonl``
    (file and line of each sample; a verified report's origins follow decisions.jsonl line
    by line). When a line without a domain is a ``ref``, the packages are read key by key
    instead (`audit.sources.sample_domains`: a ref takes its target's domain)."""
    missing = [p for p in packages.values() if not p.available]
    if any(refs for _, _, refs in shards.values()):
        return sample_domains(packages)
    names: list[str | None] = [None]
    index: dict[str, int] = {}
    by_file: dict[tuple[str, str], array] = {}
    for where_, (local, codes, _) in shards.items():
        table = [0]
        for name in local:
            code = index.get(name)
            if code is None:
                code = index[name] = len(names)
                names.append(name)
            table.append(code)
        by_file[where_] = array("I", map(table.__getitem__, codes))
    out = array("I", bytes(4 * len(summary.samples)))
    with open(report / "origins.jsonl", "rb") as fh:
        for i, raw in enumerate(fh):
            o = orjson.loads(raw)
            found = by_file.get((o["package_id"], o["file"]))
            if found is None:
                continue
            line = o["line"]
            if line > len(found):
                raise NearDedupError(f"report {report}: origins.jsonl:{i + 1}: line {line} of "
                                     f"{o['file']} of package {o['package_id']}, which has "
                                     f"{len(found)} lines; the report does not match the "
                                     f"package")
            out[i] = found[line - 1]
    return LineDomains(summary.samples, names, out, missing)


def count_samples(summary: ReportSummary, domains: Domains) -> ReportCounts:
    """`audit.rates.count_report` from the verifier's record of every sample (no second
    read of decisions.jsonl): the samples counted by (split, domain, package, decision)
    first, then the tallies."""
    samples = summary.samples
    if isinstance(domains, LineDomains):
        codes, names = domains.codes, domains.names
        combos = Counter((d.split, codes[d.line - 1], k[0], d.decision)
                         for k, d in samples.items())
        named = [(split, names[code], pkg, decision, n)
                 for (split, code, pkg, decision), n in combos.items()]
    else:
        named = [(split, domain, pkg, decision, n) for (split, domain, pkg, decision), n in
                 Counter((d.split, domains.of(k), k[0], d.decision)
                         for k, d in samples.items()).items()]
    counts = ReportCounts(missing_packages=[p.package_id for p in domains.missing])
    for split, domain, pkg, decision, n in named:
        for t in (counts.by_split[split], counts.by_domain[domain], counts.by_package[pkg],
                  counts.total):
            t.samples += n
            if decision == "exclude":
                t.exclude += n
            else:
                t.keep += n
    return counts


@dataclass
class SiteData:
    """Everything the pages are rendered from."""

    report: Path
    manifest: ReportManifest
    summary: ReportSummary
    inputs: dict[str, InputPackage]
    domains: Domains
    relations: Relations
    texts: dict[Key, SampleText] = field(default_factory=dict)

    def decision(self, key: Key):
        return self.summary.samples.get(key)

    def domain(self, key: Key) -> str | None:
        return self.domains.of(key)


def verify(report: Path) -> int:
    """`report.verify_report` in a worker process; returns the number of samples only (the
    caller keeps its own record of them, `read_decisions`)."""
    return len(verify_report(report).samples)


def read_decisions(report: Path) -> dict[Key, SampleDecision]:
    """The verifier's record of every sample (`report.SampleDecision`: line, split, node,
    decision, reason, kept, jaccard), from decisions.jsonl read as plain JSON; nodes (one
    content within one split) are numbered in order of first appearance, as the verifier
    numbers them. For a report verified beside it (`verify`)."""
    out: dict[Key, SampleDecision] = {}
    nodes: dict[tuple[str, str], int] = {}
    loads, record = orjson.loads, tuple.__new__  # a NamedTuple made without its __new__
    with open(report / "decisions.jsonl", "rb") as fh:
        for n, raw in enumerate(fh, 1):
            d = loads(raw)
            split, kept, jaccard = d["split"], d["kept"], d["jaccard"]
            node = nodes.setdefault((d["content_id"], split), len(nodes))
            out[(d["package_id"], d["sample_id"])] = record(SampleDecision, (
                n, split, node, d["decision"], d["reason"],
                None if kept is None else (kept["package_id"], kept["sample_id"]),
                None if jaccard is None else float(jaccard), None))
    return out


def excluded_by(summary: ReportSummary) -> dict[Key, list[Key]]:
    """Kept sample → the samples excluded in its favour, in decision order."""
    out: dict[Key, list[Key]] = defaultdict(list)
    for k, d in summary.samples.items():
        if d.kept is not None:
            out[d.kept].append(k)
    return dict(out)


def content_ids(report: Path, summary: ReportSummary, wanted: set[Key]) -> dict[Key, str]:
    """content_id of these samples (the partners of ``listed_as: match`` relations): only
    their lines of decisions.jsonl are parsed (the verifier recorded each sample's line)."""
    lines = {summary.samples[k].line: k for k in wanted if k in summary.samples}
    return {k: orjson.loads(raw)["content_id"]
            for k, raw in _lines(report, "decisions.jsonl", lines)}


def _lines(report: Path, name: str, lines: dict[int, Key]) -> Iterator[tuple[Key, bytes]]:
    """(key, raw line) of these 1-based lines of one of the report's files."""
    if not lines:
        return
    last = max(lines)
    with open(report / name, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            key = lines.get(n)
            if key is not None:
                yield key, raw
            if n >= last:
                break


def locate(report: Path, summary: ReportSummary, keys: Iterable[Key]) -> dict[Key, OriginRow]:
    """origins.jsonl rows of these samples (`audit.sources.locate`), reading only their lines:
    a verified report's origins follow decisions.jsonl line by line."""
    return locate_lines(report, {summary.samples[k].line: k for k in keys
                                 if k in summary.samples})


def locate_lines(report: Path, lines: dict[int, Key]) -> dict[Key, OriginRow]:
    """origins.jsonl rows at these decisions.jsonl lines (1-based line → sample)."""
    return {k: OriginRow.model_validate_json(raw)
            for k, raw in _lines(report, "origins.jsonl", lines)}


#: The fields of a decisions.jsonl line in the order of the typed row (`report.DecisionRow`).
DECISION_FIELDS = tuple(DecisionRow.model_fields)


def decision_object(raw: bytes) -> dict:
    """A decisions.jsonl line of a verified report as a plain JSON object with the fields in
    the order of `report.DecisionRow` and its Jaccard a float, as the typed row gives them."""
    line = orjson.loads(raw)
    d = {name: line[name] for name in DECISION_FIELDS}
    if d["jaccard"] is not None:
        d["jaccard"] = float(d["jaccard"])
    return d


def decision_row(key: Key, d: SampleDecision) -> DecisionRow:
    """The fields of a decision that `audit.explain.explain_why` reads, from the verifier's
    record of the sample (already checked: built without validating again)."""
    kept = None if d.kept is None else SampleRef.model_construct(package_id=d.kept[0],
                                                                 sample_id=d.kept[1])
    fields: dict[str, Any] = {"package_id": key[0], "sample_id": key[1], "split": d.split,
                              "decision": d.decision, "kept": kept, "reason": d.reason,
                              "jaccard": d.jaccard}
    return DecisionRow.model_construct(**fields)


def domain_codes(domains: Domains, summary: ReportSummary) -> tuple[list[str | None], array]:
    """Every sample's domain as names and one code per decisions.jsonl line."""
    if isinstance(domains, LineDomains):
        return domains.names, domains.codes
    names: list[str | None] = [None]
    index: dict[str | None, int] = {None: 0}
    codes = array("I")
    for key in summary.samples:  # the verifier's record is in decisions.jsonl order
        name = domains.of(key)
        code = index.get(name)
        if code is None:
            code = index[name] = len(names)
            names.append(name)
        codes.append(code)
    return names, codes


def search_part(report: Path, start: int, stop: int, shards: int, names: list[str | None],
                codes: array, tails: dict[int, bytes], part: Path) -> list[int]:
    """The search records of decisions.jsonl lines ``start + 1`` to ``stop`` (with
    origins.jsonl's), each followed by ``,\n``, written to the file ``part`` grouped by
    search shard (`views.shard_of`) in line order; returns each shard's length in ``part``.

    A record is the decision's fields, its origin's file, line and source, its domain
    (``names[codes[i]]``), then either the fields of ``tails[line]`` (a JSON object: ``why``
    and everything that comes from the sample's relations, made by the caller) or, for a
    sample without any, its ``why`` alone. Runs in a worker process: it reads only the report's two files."""
    frags = [bytearray() for _ in range(shards)]
    plain: dict[tuple[str, str], str] = {}
    with open(report / "decisions.jsonl", "rb") as fd, \
            open(report / "origins.jsonl", "rb") as fo:
        rows = zip(islice(fd, start, stop), islice(fo, start, stop), strict=True)
        for i, (rd, ro) in enumerate(rows):
            d = decision_object(rd)
            o = orjson.loads(ro)
            d["file"], d["line"], d["source"] = o["file"], o["line"], o["source"]
            d["domain"] = names[codes[i]]
            tail = tails.get(start + i + 1)
            if tail is None and d["kept"] is None:
                ck = (d["reason"], d["split"])
                why = plain.get(ck)
                if why is None:
                    why = plain[ck] = explain_why(_row(d), [])
                d["why"] = why
            elif tail is None:
                d["why"] = explain_why(_row(d), [])
            pid, sid = d["package_id"], d["sample_id"]
            frag = frags[views.shard_of(pid, sid, shards)]
            frag += orjson.dumps(f"{pid}\n{sid}")
            frag += b":"
            if tail is None:
                frag += orjson.dumps(d)
            else:  # the object's fields, then the tail's: one JSON object
                frag += orjson.dumps(d)[:-1]
                frag += b","
                frag += tail[1:]
            frag += b",\n"
    with open(part, "wb") as fh:
        for frag in frags:
            fh.write(frag)
    return [len(frag) for frag in frags]


def _row(d: dict) -> DecisionRow:
    fields = {name: d[name] for name in DECISION_FIELDS}
    if fields["kept"] is not None:
        fields["kept"] = SampleRef.model_construct(**fields["kept"])
    return DecisionRow.model_construct(**fields)
