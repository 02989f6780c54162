"""`verify_report` (``report verify``): a frozen near-dedup report checked from its own files.

The report is written by the scan (`near_dedup_core.scan.write`) after its greedy decisions
(`near_dedup_core.scan.decide`, docs/contract.md "scan"): a node's first sample is excluded
iff it directly matches, without a guard block, an earlier node whose first sample was kept;
no transitivity; history-only matches are relations and never exclude. Every file is read
through its model (`near_dedup_core.formats.report`); what the models cannot say (order,
cross-references, the greedy rule, counts) is checked here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

import orjson

from near_dedup_core.errors import NearDedupError
from near_dedup_core.formats.report import (
    FILES,
    FORMAT,
    FORMAT_VERSION,
    ROW_MODELS,
    VERSIONS,
    DecisionRow,
    MatchSource,
    OriginRow,
    RelationRow,
    ReportManifest,
    SampleKey,
    iter_rows,
)
from near_dedup_core.fsutil import iter_json_objects, validate_model, verify_checksums
from near_dedup_core.report.counts import Tally
from near_dedup_core.results import FolderResult
from near_dedup_core.wording import count

KEEP_REASONS = ("unique", "guard_blocked", "match_not_kept", "retained_split")
EXCLUDE_REASONS = ("near_duplicate", "exact_duplicate", "takedown")


def report_manifest(path: str | Path) -> tuple[ReportManifest, dict]:
    """The validated manifest model and the parsed JSON object; every problem is one line."""
    path = Path(path)
    label = f"report {path}"
    try:
        raw = orjson.loads((path / "manifest.json").read_bytes())
    except FileNotFoundError:
        raise NearDedupError(f"{label}: manifest.json is missing") from None
    except OSError as exc:
        raise NearDedupError(f"{label}: manifest.json cannot be read ({exc.strerror})") from None
    except orjson.JSONDecodeError as exc:
        raise NearDedupError(f"{label}: manifest.json is not valid JSON ({exc})") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise NearDedupError(f"{label}: manifest.json is not a near-dedup report manifest")
    version = raw.get("format_version")
    if type(version) is not int or version not in VERSIONS:
        raise NearDedupError(f"{label}: format_version {version!r} is not one of "
                             f"{', '.join(map(str, VERSIONS))} (this tool writes "
                             f"{FORMAT_VERSION})")
    model = validate_model(ReportManifest, raw, f"{label}: manifest.json")
    if (version == 1) != (model.takedowns is None):
        raise NearDedupError(f"{label}: manifest.json: takedowns are listed by format 2 "
                             f"reports, and only there")
    return model, raw


def load_manifest(path: str | Path) -> dict:
    """The report's manifest as a JSON object, validated against `ReportManifest`."""
    return report_manifest(path)[1]


def _iter_jsonl(path: Path, name: str) -> Iterator[dict]:
    return (row for _, row in iter_json_objects(path, name, f"report {path}"))


def iter_decisions(path: str | Path) -> Iterator[dict]:
    return _iter_jsonl(Path(path), "decisions.jsonl")


class SampleDecision(NamedTuple):
    """One line of decisions.jsonl as the verifier keeps it (``node``: content within split)."""

    line: int
    split: str
    node: int
    decision: str
    reason: str
    kept: SampleKey | None
    jaccard: float | None
    text_sha256: bytes | None  # kept only when the caller asks (mixture verify)


@dataclass
class ReportSummary(FolderResult):
    """A verified report: its manifest (the JSON object and the `ReportManifest` model), its
    ``counts`` and one small record per sample."""

    manifest: dict
    model: ReportManifest
    samples: dict[SampleKey, SampleDecision] = field(default_factory=dict, repr=False)
    #: samples whose text and origin were re-read from the input packages (``--inputs``)
    inputs_checked: int | None = None

    def summary(self) -> str:
        c = self.counts
        inputs = ("" if self.inputs_checked is None else
                  f"; texts and origins of {count(self.inputs_checked, 'sample')} match the input "
                  f"packages")
        return (f"report {self.path}: OK — checksums, manifest and {count(c['samples'], 'decision')} "
                f"consistent (keep {c['keep']:,}, exclude {c['exclude']:,}, "
                f"{count(c['relations'], 'relation')}){inputs}")


def _describe(decision: str, reason: str, kept: SampleKey | None, jaccard: float | None) -> str:
    if kept is None:
        return f"{decision} ({reason})"
    return f"{decision} ({reason} of {kept[0]}/{kept[1]}, jaccard {jaccard})"


@dataclass
class _NearState:
    """What a sample's pool near relations say for the greedy rule."""

    edge: bool = False  # any near match with an earlier pool node (guard-blocked or not)
    open: bool = False  # any such match not blocked by the guard
    first_kept: tuple[SampleKey, float] | None = None  # earliest open match with a kept sample


@dataclass
class _RelationCursor:
    """Where the pass over relations.jsonl is: the content blocks and samples listed so
    far, and within the current sample its last section and matches."""

    blocks: dict[int, int] = field(default_factory=dict)  # node -> its block's position
    matched_unlisted: set[int] = field(default_factory=set)  # matched before their block
    samples_seen: set[SampleKey] = field(default_factory=set)
    max_cid: str = ""  # greatest content_id of the blocks listed so far
    node: int = -1
    order: tuple = ()  # (batch, input position, sample id) of the current sample
    sample: SampleKey | None = None
    section: int = -1  # 0 exact, 1 history exact, 2 near, 3 history near
    last_block: int = -1
    last_hist: str = ""
    near_nodes: set[int] = field(default_factory=set)
    last_near: int = -1

    def enter_sample(self, key: SampleKey, order: tuple) -> None:
        self.sample, self.order = key, order
        self.section, self.last_block, self.last_hist = -1, -1, ""
        self.near_nodes = set()
        self.last_near = -1


class _ReportCheck:
    """The cross-checks of `verify_report`, one streaming pass per file.

    Decision order (docs/contract.md, "scan") is first-ingest order of contents; the batch
    that first ingested a content is not in the report, so the order of nodes is not
    re-derivable from the files.
    What is: within a node (one content_id within one split) the first sample is the least
    (batch of its package, input position, sample id); relations.jsonl lists the nodes in
    decision order, so a pool match must belong to a node listed before the matching one or
    to one without relations of its own; near matches of one sample are listed in decision
    order. With those, every decision is re-derived from the decisions of its matches
    (greedy rule, module docstring) and must equal the recorded one: by induction over
    decision order the recorded decisions are then exactly the greedy result over the
    recorded relations.
    """

    def __init__(self, path: Path, manifest: ReportManifest, keep_text_sha256: bool) -> None:
        self.path = path
        self.keep_text_sha256 = keep_text_sha256
        self.m = manifest
        self.retained = set(manifest.config.retained_splits)
        self.threshold = manifest.config.threshold
        self.decided: dict[SampleKey, SampleDecision] = {}
        self.node_ids: dict[tuple[str, str], int] = {}
        self.node_content: list[str] = []
        self.node_first: list[tuple[tuple, SampleKey]] = []
        self.exact_link: dict[SampleKey, SampleKey] = {}
        self.near: dict[SampleKey, _NearState] = {}
        self.tally = Tally(manifest.config.threshold)
        self.lines = {"decisions.jsonl": 0, "relations.jsonl": 0, "origins.jsonl": 0}
        #: format 2: the takedowns in force (request id -> act), each sample's first
        #: takedown Jaccard, and the samples each request took down
        self.takedowns = {t.request_id: t.act for t in manifest.takedowns or ()}
        self.down: dict[SampleKey, float] = {}
        self.down_by: dict[str, set[SampleKey]] = {r: set() for r in self.takedowns}

    def fail(self, message: str) -> NoReturn:
        raise NearDedupError(f"report {self.path}: {message}")

    def _rows(self, name: str) -> Iterator[tuple[str, Any]]:
        for n, row in iter_rows(self.path, name, ROW_MODELS[name], f"report {self.path}"):
            self.lines[name] = n
            yield f"{name}:{n}", row

    def _line_count(self, name: str, recorded: int) -> None:
        if self.lines[name] != recorded:
            self.fail(f"{name} has {self.lines[name]} lines, manifest.json says {recorded}")

    # ---------------------------------------------------------------- manifest

    def manifest(self, raw: dict) -> None:
        m = self.m
        if raw["config"] != m.config.model_dump(mode="json"):
            self.fail("manifest.json: config does not list every field of the configuration")
        if m.config.fingerprint(m.algorithm_version) != m.config_fingerprint:
            self.fail("manifest.json: config_fingerprint does not match config and "
                      "algorithm_version (config changed)")
        indexed = {}
        for p in m.index.packages:
            if p.package_id in indexed:
                self.fail(f"manifest.json: index.packages lists {p.package_id} twice")
            indexed[p.package_id] = p
        seen: set[str] = set()
        for i in m.inputs:
            if i.package_id in seen:
                self.fail(f"manifest.json: inputs list {i.package_id} twice")
            seen.add(i.package_id)
            listed = indexed.get(i.package_id)
            if listed is None or ((listed.kind, listed.manifest_sha256)
                                  != (i.kind, i.manifest_sha256)):
                self.fail(f"manifest.json: input {i.package_id} is not in index.packages with "
                          f"the same kind and manifest_sha256")
        self.batch = {pid: p.batch for pid, p in indexed.items()}
        self.first_batch = min(self.batch.values())
        self.input_pos = {i.package_id: k for k, i in enumerate(m.inputs)}
        self.outside = set(indexed) - seen

    # ---------------------------------------------------------------- decisions.jsonl

    def _outcome(self, loc: str, decision: str, reason: str, kept: SampleKey | None,
                 jaccard: float | None) -> None:
        """A decision's fields agree with each other."""
        if reason == "takedown":
            if self.m.takedowns is None:
                self.fail(f"{loc}: reason takedown is for format 2 reports")
            if decision != "exclude" or kept is not None or jaccard is None \
                    or not self.threshold <= jaccard <= 1.0:
                self.fail(f"{loc}: a sample taken down is excluded, names no kept sample "
                          f"and has the jaccard of its first takedown match")
        elif decision == "keep":
            if kept is not None:
                self.fail(f"{loc}: a kept sample names a kept sample; kept must be null")
            if jaccard is not None:
                self.fail(f"{loc}: a kept sample has jaccard {jaccard!r}, expected null")
            if reason not in KEEP_REASONS:
                self.fail(f"{loc}: reason {reason!r} is not a reason to keep")
        else:
            if kept is None:
                self.fail(f"{loc}: an excluded sample names the sample it is excluded for "
                          f"(kept)")
            if reason not in EXCLUDE_REASONS:
                self.fail(f"{loc}: reason {reason!r} is not a reason to exclude")
            if jaccard is None or not self.threshold <= jaccard <= 1.0 \
                    or (reason == "exact_duplicate" and jaccard != 1.0):
                self.fail(f"{loc}: jaccard must be a number from the threshold "
                          f"{self.threshold} to 1 (1.0 for exact_duplicate), found "
                          f"{jaccard!r}")

    def decisions(self) -> None:
        last_pos = 0
        per_package: Counter = Counter()
        row: DecisionRow
        for loc, row in self._rows("decisions.jsonl"):
            pid, sid, split = row.package_id, row.sample_id, row.split
            decision, reason, jaccard = row.decision, row.reason, row.jaccard
            pos = self.input_pos.get(pid)
            if pos is None:
                self.fail(f"{loc}: package {pid} is not among the inputs")
            if pos < last_pos:
                self.fail(f"{loc}: package {pid} after a later input; decisions follow input "
                          f"order")
            last_pos = pos
            key = (pid, sid)
            if key in self.decided:
                self.fail(f"{loc}: sample {pid}/{sid} is decided twice")
            kept = row.kept.key if row.kept is not None else None
            self._outcome(loc, decision, reason, kept, jaccard)
            if split in self.retained and decision == "exclude" and reason != "takedown":
                self.fail(f"{loc}: a sample of retained split {split} is excluded")
            if (split in self.retained) != (reason == "retained_split") \
                    and reason != "takedown":
                self.fail(f"{loc}: reason retained_split is for the samples of retained splits "
                          f"{sorted(self.retained)} only, and the only reason there")
            node_key = (row.content_id, split)
            node = self.node_ids.get(node_key)
            order = (self.batch[pid], pos, sid)
            if node is None:
                node = self.node_ids[node_key] = len(self.node_content)
                self.node_content.append(row.content_id)
                self.node_first.append((order, key))
            elif order < self.node_first[node][0]:
                self.node_first[node] = (order, key)
            self.decided[key] = SampleDecision(
                self.lines["decisions.jsonl"], split, node, decision, reason, kept, jaccard,
                bytes.fromhex(row.text_sha256) if self.keep_text_sha256 else None)
            per_package[pid] += 1
            self.tally.decision(split, decision, reason)
        self._line_count("decisions.jsonl", self.m.files.decisions.lines)
        for i in self.m.inputs:
            if per_package[i.package_id] != i.records:
                self.fail(f"decisions.jsonl has {per_package[i.package_id]} samples of "
                          f"{i.package_id}, manifest.json says {i.records}")

    # ---------------------------------------------------------------- relations.jsonl

    def _match_sources(self, loc: str, sources: list[MatchSource], split: str) -> bool:
        previous = None
        for src in sources:
            if src.package_id not in self.outside:
                self.fail(f"{loc}: match source package {src.package_id} is not an indexed "
                          f"package outside the inputs (manifest.json index.packages)")
            if src.split != split:
                self.fail(f"{loc}: match source {src.package_id}/{src.sample_id} is in "
                          f"split {src.split}, the sample in {split}")
            here = (src.package_id, src.sample_id)
            if previous is not None and here <= previous:
                self.fail(f"{loc}: match_sources are not sorted and distinct")
            previous = here
        return bool(sources)

    def relations(self) -> None:
        """One pass over relations.jsonl: each line's own fields, then where it stands in
        the listing (its content's block, its sample, its section), then what its match says
        for the greedy rule (`rule`)."""
        cur = _RelationCursor()
        row: RelationRow
        for loc, row in self._rows("relations.jsonl"):
            key = row.sample.key
            d = self.decided.get(key)
            if d is None:
                self.fail(f"{loc}: sample {key[0]}/{key[1]} is not in decisions.jsonl")
            if not self.threshold <= row.jaccard <= 1.0:
                self.fail(f"{loc}: jaccard must be a number from the threshold "
                          f"{self.threshold} to 1, found {row.jaccard!r}")
            has_sources = self._match_sources(loc, row.match_sources, d.split)
            if d.node != cur.node:
                self._enter_content(loc, cur, key, d)
            if key != cur.sample:
                self._enter_sample(loc, cur, key)
            if row.takedown is not None:
                self._takedown_relation(loc, row, key, cur.section)
                cur.section = 4
                continue
            if row.history_only:
                self._history_match(loc, row, has_sources)
                match_key = None
            else:
                match_key = self._pool_match(loc, row, d)
            if row.kind == "exact":
                section = self._exact(loc, row, key, d, match_key)
            elif match_key is None:
                section = self._history_near(loc, cur, row, d)
            else:
                section = self._pool_near(loc, cur, row, key, d, match_key)
            if section < cur.section or (section == cur.section and section < 2):
                self.fail(f"{loc}: relations of {key[0]}/{key[1]} are out of order (exact, "
                          f"history exact, near, history near; one exact of each)")
            cur.section = section
            self.tally.relation(row.kind, row.history_only, row.blocked_by, row.jaccard)
        self._line_count("relations.jsonl", self.m.files.relations.lines)

    def _takedown_relation(self, loc: str, row: RelationRow, key: SampleKey,
                           section: int) -> None:
        """A relation to a taken-down text (format 2): of a takedown the manifest lists, no
        pool match, listed last among the sample's relations."""
        assert row.takedown is not None
        request = row.takedown.request_id
        if request not in self.takedowns:
            self.fail(f"{loc}: takedown {request} is not among the manifest's takedowns")
        match = row.match
        if match.package_id is not None or match.sample_id is not None or row.history_only \
                or row.match_sources or row.blocked_by is not None \
                or (row.kind == "exact" and row.jaccard != 1.0):
            self.fail(f"{loc}: a takedown relation has null package_id and sample_id, no "
                      f"history, sources or guard block (and jaccard 1.0 if exact)")
        if section > 4:
            self.fail(f"{loc}: relations of {key[0]}/{key[1]} are out of order (takedowns last)")
        self.down.setdefault(key, row.jaccard)
        self.down_by[request].add(key)
        self.tally.relation(row.kind, False, None, row.jaccard, takedown=True)

    def _enter_content(self, loc: str, cur: _RelationCursor, key: SampleKey,
                       d: SampleDecision) -> None:
        """The first line of a content's block: its relations are listed together, after
        nothing that matched it, in first-ingest order where that is known."""
        node = d.node
        if node in cur.blocks:
            self.fail(f"{loc}: relations of content {self.node_content[node][:12]}… "
                      f"in split {d.split} are not listed together")
        if node in cur.matched_unlisted:
            self.fail(f"{loc}: sample {key[0]}/{key[1]} is listed after a sample that "
                      f"matched it; relations follow decision order")
        if self._exact_batch(node) and self.node_content[node] < cur.max_cid:
            self.fail(f"{loc}: content {self.node_content[node][:12]}… is listed after "
                      f"a content that comes later in first-ingest order")
        cur.max_cid = max(cur.max_cid, self.node_content[node])
        cur.blocks[node] = len(cur.blocks)
        cur.node = node
        cur.order = ()

    def _enter_sample(self, loc: str, cur: _RelationCursor, key: SampleKey) -> None:
        """The first line of a sample's relations: listed together, the samples of one
        content in decision order."""
        if key in cur.samples_seen:
            self.fail(f"{loc}: relations of sample {key[0]}/{key[1]} are not listed "
                      f"together")
        cur.samples_seen.add(key)
        order = (self.batch[key[0]], self.input_pos[key[0]], key[1])
        if order <= cur.order:
            self.fail(f"{loc}: samples of one content are not in decision order "
                      f"(package batch, input position, sample id)")
        cur.enter_sample(key, order)

    def _history_match(self, loc: str, row: RelationRow, has_sources: bool) -> None:
        """A history-only match names no pool sample and lists where it came from."""
        if row.match.package_id is not None or row.match.sample_id is not None:
            self.fail(f"{loc}: a history_only match has null package_id and sample_id")
        if not has_sources:
            self.fail(f"{loc}: a history_only match lists its match_sources")

    def _pool_match(self, loc: str, row: RelationRow, d: SampleDecision) -> SampleKey:
        """A pool match is the first sample, in decision order, of a content of the same
        split in decisions.jsonl."""
        match = row.match
        match_key = match.key
        md = self.decided.get(match_key) if match_key is not None else None
        if match_key is None or md is None:
            self.fail(f"{loc}: match is not a sample in decisions.jsonl")
        if md.split != d.split or self.node_content[md.node] != match.content_id:
            self.fail(f"{loc}: match {match_key[0]}/{match_key[1]} has another split "
                      f"or content_id in decisions.jsonl")
        if self.node_first[md.node][1] != match_key:
            self.fail(f"{loc}: match {match_key[0]}/{match_key[1]} is not the first "
                      f"sample of its content in decision order")
        return match_key

    def _exact(self, loc: str, row: RelationRow, key: SampleKey, d: SampleDecision,
               match_key: SampleKey | None) -> int:
        """An exact relation (section 0, history: 1) links the sample to its content's first
        sample."""
        if row.jaccard != 1.0 or row.blocked_by is not None \
                or row.match.content_id != self.node_content[d.node]:
            self.fail(f"{loc}: an exact relation has jaccard 1.0, no guard block and "
                      f"the sample's own content_id")
        if match_key is not None:
            if match_key == key:
                self.fail(f"{loc}: sample matches itself")
            self.exact_link[key] = match_key
        return 1 if row.history_only else 0

    def _near_content(self, loc: str, row: RelationRow, d: SampleDecision) -> None:
        if row.match.content_id == self.node_content[d.node]:
            self.fail(f"{loc}: a near relation matches the sample's own content")

    def _history_near(self, loc: str, cur: _RelationCursor, row: RelationRow,
                      d: SampleDecision) -> int:
        """A history near relation (section 3): sorted by content_id."""
        self._near_content(loc, row, d)
        if row.match.content_id <= cur.last_hist:
            self.fail(f"{loc}: history near matches are not sorted by content_id")
        cur.last_hist = row.match.content_id
        return 3

    def _pool_near(self, loc: str, cur: _RelationCursor, row: RelationRow, key: SampleKey,
                   d: SampleDecision, match_key: SampleKey) -> int:
        """A pool near relation (section 2): each earlier content once, in decision order;
        it feeds the sample's `_NearState`."""
        self._near_content(loc, row, d)
        md = self.decided[match_key]
        if md.node in cur.near_nodes:
            self.fail(f"{loc}: {key[0]}/{key[1]} matches {match_key[0]}/"
                      f"{match_key[1]} twice")
        cur.near_nodes.add(md.node)
        if not self._before(md.node, d.node) or (
                cur.last_near >= 0 and not self._before(cur.last_near, md.node)):
            self.fail(f"{loc}: near matches of {key[0]}/{key[1]} are not earlier "
                      f"contents in first-ingest order")
        cur.last_near = md.node
        block = cur.blocks.get(md.node)
        if block is None:
            cur.matched_unlisted.add(md.node)
        elif block <= cur.last_block:
            self.fail(f"{loc}: near matches of {key[0]}/{key[1]} are not in "
                      f"decision order")
        else:
            cur.last_block = block
        st = self.near.get(key)
        if st is None:
            st = self.near[key] = _NearState()
        st.edge = True
        if row.blocked_by is None:
            st.open = True
            if st.first_kept is None and md.decision == "keep":
                st.first_kept = (match_key, row.jaccard)
        return 2

    def _exact_batch(self, node: int) -> bool:
        """The content's first-ingest batch is known: a sample of it came with the index's
        first batch (otherwise only an upper bound, its samples' earliest batch, is)."""
        return self.node_first[node][0][0] == self.first_batch

    def _before(self, a: int, b: int) -> bool:
        """Whether node ``a`` can precede node ``b`` in decision order (batch, content_id):
        a's batch is at least the index's first batch, b's at most its samples' earliest."""
        return not (self._exact_batch(b) and self.node_content[b] < self.node_content[a])

    # ---------------------------------------------------------------- the greedy rule

    def rule(self) -> None:
        for key, d in self.decided.items():
            loc = f"decisions.jsonl:{d.line}"
            if d.kept is not None:
                target = self.decided.get(d.kept)
                if target is None or target.decision != "keep" or d.kept == key:
                    self.fail(f"{loc}: excluded sample's kept sample is not a kept sample of "
                              f"the pool")
            first = self.node_first[d.node][1]
            if key != first and self.exact_link.get(key) != first:
                self.fail(f"{loc}: {key[0]}/{key[1]} shares content and split with "
                          f"{first[0]}/{first[1]}, but relations.jsonl has no exact relation "
                          f"between them")
            expected: tuple[str, str, SampleKey | None, float | None]
            if key in self.down or d.reason == "takedown":
                expected = ("exclude", "takedown", None, self.down.get(key))
                if (d.decision, d.reason, d.kept, d.jaccard) != expected:
                    self.fail(f"{loc}: {key[0]}/{key[1]} is "
                              f"{_describe(d.decision, d.reason, d.kept, d.jaccard)} but "
                              f"relations.jsonl gives "
                              f"{_describe(*expected) if key in self.down else 'no takedown'}")
                continue
            if d.reason == "retained_split":
                continue
            if key != first:
                f = self.decided[first]
                expected = (("exclude", "exact_duplicate", first, 1.0) if f.decision == "keep"
                            else ("exclude", "near_duplicate", f.kept, f.jaccard))
            else:
                st = self.near.get(key) or _NearState()
                if st.first_kept is not None:
                    expected = ("exclude", "near_duplicate", *st.first_kept)
                else:
                    reason = ("match_not_kept" if st.open else
                              "guard_blocked" if st.edge else "unique")
                    expected = ("keep", reason, None, None)
            if (d.decision, d.reason, d.kept, d.jaccard) != expected:
                self.fail(f"{loc}: {key[0]}/{key[1]} is "
                          f"{_describe(d.decision, d.reason, d.kept, d.jaccard)} but "
                          f"relations.jsonl and the earlier decisions give "
                          f"{_describe(*expected)}")

    # ---------------------------------------------------------------- origins.jsonl

    def origins(self) -> None:
        decided = iter(self.decided.items())
        package = file = None
        files_done: set[str] = set()
        expect = 0
        split = ""
        row: OriginRow
        for loc, row in self._rows("origins.jsonl"):
            n = self.lines["origins.jsonl"]
            item = next(decided, None)
            if item is None:
                self.fail("origins.jsonl and decisions.jsonl differ in length")
            key, d = item
            if (row.package_id, row.sample_id, row.split) != (*key, d.split):
                self.fail(f"origins.jsonl:{n} does not describe the sample of "
                          f"decisions.jsonl:{n}")
            if key[0] != package:
                package, file, files_done = key[0], None, set()
            if row.file != file:
                file = row.file
                if file in files_done:
                    self.fail(f"{loc}: {file} of {package} appears in two runs; samples follow "
                              f"their order in the package")
                files_done.add(file)
                expect, split = 1, d.split
            if row.line != expect:
                self.fail(f"{loc}: line {row.line} of {file}, expected {expect}; samples "
                          f"follow their order in the package")
            if d.split != split:
                self.fail(f"{loc}: {file} holds samples of splits {split} and {d.split}")
            expect += 1
        if next(decided, None) is not None:
            self.fail("origins.jsonl and decisions.jsonl differ in length")
        self._line_count("origins.jsonl", self.m.files.origins.lines)

    def counts(self, raw: dict) -> None:
        for t in self.m.takedowns or ():
            if len(self.down_by[t.request_id]) != t.samples:
                self.fail(f"manifest.json: takedown {t.request_id} took down {t.samples} "
                          f"samples, relations.jsonl has {len(self.down_by[t.request_id])}")
        if len(self.takedowns) != len(self.m.takedowns or ()):
            self.fail("manifest.json: takedowns lists a request twice")
        recorded = {k: v for k, v in raw["counts"].items() if k != "candidates"}
        if recorded != self.tally.counts():
            self.fail("counts in manifest.json do not match decisions.jsonl and "
                      "relations.jsonl")


def verify_report(path: str | Path, *, keep_text_sha256: bool = False) -> ReportSummary:
    """Check a report folder from its own files; raise NearDedupError naming the first problem.

    - ``checksums.sha256`` in canonical form over plain files (`fsutil.verify_checksums`);
    - ``manifest.json`` against `ReportManifest` (strict types), ``config_fingerprint``
      recomputed from ``config`` and ``algorithm_version``, inputs among the indexed packages;
    - every line of every file typed, line counts and ``counts`` recomputed;
    - relations: samples and pool matches are decided samples of the same split, a match is
      the first sample of its content, exact/near/history fields agree, history sources are
      indexed packages outside the pool, the file follows decision order (`_ReportCheck`);
    - every decision re-derived by the greedy rule from the relations and the decisions of
      its matches; origins describe the decisions line by line, in package order.

    Streams each file once; keeps one small record per sample (`ReportSummary.samples`;
    with ``keep_text_sha256`` it includes the sample's text_sha256).
    """
    path = Path(path)
    if not path.is_dir():
        raise NearDedupError(f"report {path}: not a directory")
    listed = verify_checksums(path, "report")
    for name in ("manifest.json", *FILES):
        if name not in listed:
            raise NearDedupError(f"report {path}: {name} is not listed in checksums.sha256")
    if len(listed) != len(FILES) + 1:
        extra = sorted(set(listed) - {"manifest.json", *FILES})
        raise NearDedupError(f"report {path}: {extra[0]} does not belong in a report")
    manifest, raw = report_manifest(path)
    check = _ReportCheck(path, manifest, keep_text_sha256)
    check.manifest(raw)
    check.decisions()
    check.relations()
    check.rule()
    check.origins()
    check.counts(raw)
    return ReportSummary(path=path, counts=raw["counts"], manifest=raw, model=manifest,
                         samples=check.decided)
