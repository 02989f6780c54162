"""`report explain`: why one sample of a frozen report was kept or excluded, and by what.

Everything about the decision comes from the report itself, streamed (never loaded whole):

1. ``relations.jsonl``: every verified pair the sample takes part in. A pair is listed once,
   from the later sample's side, so the sample appears either as ``sample`` (it matched an
   earlier content: ``listed_as = "sample"``) or as ``match`` (a later sample matched it:
   ``listed_as = "match"``); history-only pairs have no partner in the pool and name the
   partner content's sources (``match_sources``);
2. ``decisions.jsonl`` with ``origins.jsonl`` (aligned line by line), once: the sample's
   decision, reason, kept partner and Jaccard, the partners' decisions and shard lines, and
   every sample whose ``kept`` names it (``excluded_because_of_it``);
3. only with domain-specific guard units and a guard-blocked pair: the pool samples of the
   pair's contents, whose domains select the units.

Texts come from the input packages (`sources`): the guard sequences of both sides of every
guard-blocked pair, recomputed with the report's own config (`guard.guard_for`), and a
character diff of the normalized texts of the sample and its *diff partner*: the kept
sample it lost to; for a kept sample the first guard-blocked pool partner, else its first
pool partner, else the first sample it excluded. A history-only partner has no text outside
the index, so it gets no sequences and no diff.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from near_dedup_core.audit.sources import Key, SampleText, locate, read_samples, report_inputs
from near_dedup_core.audit.textdiff import changed_spans
from near_dedup_core.errors import NearDedupError
from near_dedup_core.formats.report import (
    DecisionRow,
    OriginRow,
    decision_rows,
    origin_rows,
    relation_rows,
)
from near_dedup_core.guard import guard_for
from near_dedup_core.report import verify_report
from near_dedup_core.wording import count

#: Most samples sharing a content whose domains are read for domain-specific guard units.
MAX_DOMAIN_SAMPLES = 1_000


@dataclass
class Explanation:
    """The result of `explain_sample`; `to_json` gives the documented JSON object and
    ``notes`` the one-line remarks about what could not be shown."""

    sample: dict
    decision: str
    reason: str
    why: str
    kept: dict | None
    jaccard: float | None
    relations: list[dict]
    guard: list[dict]
    excluded_because_of_it: list[dict]
    diff: list[dict]
    diff_partner: dict | None = None
    texts: dict[str, str] = field(default_factory=dict)  # "sample"/"partner" → normalized
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"sample": self.sample, "decision": self.decision, "reason": self.reason,
                "why": self.why, "kept": self.kept, "jaccard": self.jaccard, "relations": self.relations,
                "guard": self.guard, "excluded_because_of_it": self.excluded_because_of_it,
                "diff": self.diff}


def _key(ref: dict | None) -> Key | None:
    if not ref or ref.get("package_id") is None:
        return None
    return (ref["package_id"], ref["sample_id"])


Row = tuple[DecisionRow, OriginRow]


def _rows(report: Path) -> Iterator[Row]:
    """(decision, origin) pairs, line by line (the verified report aligns them)."""
    return zip((d for _, d in decision_rows(report)), (o for _, o in origin_rows(report)),
               strict=True)


def _find_rows(report: Path, keys: set[Key]) -> dict[Key, Row]:
    return {d.key: (d, o) for d, o in _rows(report) if d.key in keys}


def _sample_record(d: DecisionRow, o: OriginRow, text: SampleText | None) -> dict:
    return {"package_id": d.package_id, "sample_id": d.sample_id, "split": d.split,
            "scope": d.scope, "content_id": d.content_id, "text_sha256": d.text_sha256,
            "decision": d.decision, "reason": d.reason, "file": o.file, "line": o.line,
            "source": o.source, "domain": text.domain if text else None,
            "text_available": text is not None}


def _first_difference(a: tuple, b: tuple) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def explain_sample(  # noqa: C901 (the explanation's parts in the order it prints them)
        report: str | Path, package_id: str, sample_id: str) -> Explanation:
    """Explain one sample's decision from the report and its input packages (no index).

    The report is verified first (`report.verify_report`): a report whose files do not
    agree with its checksums and with each other is refused, not explained."""
    report = Path(report)
    manifest = verify_report(report).model
    config = manifest.config
    inputs = report_inputs(manifest, report)
    if package_id not in inputs:
        raise NearDedupError(f"report {report}: no input package {package_id!r} (inputs: "
                             f"{', '.join(sorted(inputs)) or 'none'})")
    key = (package_id, sample_id)

    # pass 1: its relations (a pair is listed once, from the later sample's side)
    relations: list[dict] = []
    for _, rel in relation_rows(report):
        partner: dict
        if rel.sample.key == key:
            partner = rel.match.model_dump()
            listed_as = "sample"
        elif rel.match.key == key:
            partner = {"content_id": None, **rel.sample.model_dump()}
            listed_as = "match"
        else:
            continue
        relations.append({"listed_as": listed_as, "partner": partner, "kind": rel.kind,
                          "jaccard": rel.jaccard, "history_only": rel.history_only,
                          "blocked_by": rel.blocked_by,
                          "match_sources": [m.model_dump() for m in rel.match_sources],
                          **({"takedown": rel.takedown.model_dump()}
                             if rel.takedown is not None else {})})

    # pass 2: the sample, its partners, and the samples it excluded
    partners = {k for k in (_key(r["partner"]) for r in relations) if k is not None}
    target: Row | None = None
    excluded: list[dict] = []
    found: dict[Key, Row] = {}
    for d, o in _rows(report):
        k = d.key
        if k == key:
            target = (d, o)
        elif d.kept is not None and d.kept.key == key:
            excluded.append({"package_id": d.package_id, "sample_id": d.sample_id,
                             "split": d.split, "reason": d.reason, "jaccard": d.jaccard})
        if k in partners:
            found[k] = (d, o)
    if target is None:
        raise NearDedupError(f"report {report}: package {package_id} has no sample "
                             f"{sample_id!r} in this report")
    dec, origin = target
    found[key] = target
    kept_key = dec.kept.key if dec.kept is not None else None
    if kept_key is not None and kept_key not in found:  # the kept sample is always a partner
        found.update(_find_rows(report, {kept_key}))

    for r in relations:
        pk = _key(r["partner"])
        row = found.get(pk) if pk is not None else None
        if "takedown" in r:  # a taken-down text: no partner in the pool
            r["partner_decision"] = r["partner_reason"] = r["partner_kept"] = None
            continue
        if r["listed_as"] == "match" and row is not None:
            r["partner"]["content_id"] = row[0].content_id
        pd = row[0] if row is not None else None
        r["partner_decision"] = pd.decision if pd is not None else None
        r["partner_reason"] = pd.reason if pd is not None else None
        r["partner_kept"] = pd.kept.model_dump() if pd is not None and pd.kept else None

    # pass 3, only with domain-specific guard units: the pool samples of the blocked pairs'
    # contents, whose domains choose the units (as in the scan)
    blocked_contents = {dec.content_id} | {r["partner"]["content_id"] for r in relations
                                              if r["blocked_by"] and r["partner"]["content_id"]}
    same_content: dict[str, list[Key]] = {}
    if config.extra_units and any(r["blocked_by"] for r in relations):
        for d, _ in _rows(report):
            if d.content_id in blocked_contents:
                bucket = same_content.setdefault(d.content_id, [])
                if len(bucket) < MAX_DOMAIN_SAMPLES:
                    bucket.append(d.key)

    diff_key = _diff_partner(kept_key, relations, excluded)

    # texts: the sample, the diff partner, guard-blocked pool partners, domain samples
    need: set[Key] = {key} | ({diff_key} if diff_key else set()) | {
        pk for r in relations if r["blocked_by"] and (pk := _key(r["partner"])) is not None}
    domain_keys = {k for keys in same_content.values() for k in keys}
    origins = {k: found[k][1] for k in need if k in found}
    origins.update(locate(report, domain_keys - set(origins)) if domain_keys else {})
    texts = read_samples(report, inputs, origins)

    notes = [p.problem for p in inputs.values() if p.problem
             and (p.package_id in {k[0] for k in need})]
    guard_rows = []
    for r in relations:
        if not r["blocked_by"]:
            continue
        pk = _key(r["partner"])
        domains = frozenset(
            t.domain for c in (dec.content_id, r["partner"]["content_id"])
            for k in same_content.get(c, []) if (t := texts.get(k)) and t.domain)
        guard = guard_for(config, domains)
        guard_rows.append(_guard_row(r, guard, texts.get(key), texts.get(pk) if pk else None))

    sample = _sample_record(dec, origin, texts.get(key))
    kept = None
    if kept_key is not None:  # the verified report holds it; it is the diff partner
        kd, ko = found[kept_key]
        kept = _sample_record(kd, ko, texts.get(kept_key))
    spans: list[dict] = []
    partner_ref = None
    shown: dict[str, str] = {}
    if diff_key is not None:
        partner_ref = {"package_id": diff_key[0], "sample_id": diff_key[1]}
        a, b = texts.get(diff_key), texts.get(key)
        if a is not None and b is not None:
            spans = [s.to_json() for s in changed_spans(a.normalized, b.normalized)]
            shown = {"partner": a.normalized, "sample": b.normalized}
        else:
            notes.append(f"no text diff: the text of "
                         f"{'this sample' if b is None else f'{diff_key[0]}/{diff_key[1]}'} "
                         f"is not available")
    if any("takedown" in r for r in relations):
        notes.append("a taken-down text is not among the report's inputs: the index keeps "
                     "its fingerprint, not its text (docs/takedowns.md)")
    if any(r["history_only"] for r in relations):
        notes.append("history-only partners are not among the report's inputs: their texts "
                     "(and guard sequences) are only in the index")
    return Explanation(sample=sample, decision=dec.decision, reason=dec.reason,
                       why=explain_why(dec, relations), kept=kept, jaccard=dec.jaccard,
                       relations=relations,
                       guard=guard_rows, excluded_because_of_it=excluded, diff=spans,
                       diff_partner=partner_ref, texts=shown, notes=notes)


def _name(ref: dict | None) -> str:
    return f"{ref['package_id']}/{ref['sample_id']}" if ref else "-"


def explain_why(dec: DecisionRow, relations: list[dict]) -> str:
    """Why the decision is what it is, in one plain sentence: what was decided, because of
    which partner, with which similarity, under which rule (the greedy rule of
    docs/contract.md "scan", over the sample's relations in relations.jsonl order, each with
    ``partner_decision``, ``partner_reason`` and ``partner_kept``); then the earlier matches
    that did not count, and that history outside the pool never excludes."""
    if dec.reason == "takedown":
        return taken_down_why(relations)
    if dec.reason == "retained_split":
        return (f"Kept because split {dec.split} is retained: samples of a retained split are "
                f"never deduplicated.")
    earlier = [r for r in relations if r["listed_as"] == "sample" and not r["history_only"]]
    history = sum(r["history_only"] for r in relations if r["listed_as"] == "sample")
    after = (f"; its {count(history, 'match')} with indexed history outside the pool "
             f"{'does' if history == 1 else 'do'} not count" if history else "")
    first = next((r for r in earlier if r["kind"] == "exact"), None)
    kept = _name(dec.kept.model_dump()) if dec.kept else None
    jaccard = f"{dec.jaccard:.4f}" if dec.jaccard is not None else "-"
    if first is not None:
        if dec.reason == "exact_duplicate":
            return (f"Excluded because it is an exact copy (Jaccard 1.0000) of the earlier "
                    f"{_name(first['partner'])}, which was kept: only the first copy of a "
                    f"text is kept{after}.")
        return (f"Excluded in favour of {kept} (Jaccard {jaccard}) because it is an exact "
                f"copy of the earlier {_name(first['partner'])}, which was itself excluded in "
                f"favour of {kept}: every copy of a text gets the first copy's decision"
                f"{after}.")
    near = [r for r in earlier if r["kind"] == "near"]
    skipped = []
    for r in near:
        if r["blocked_by"] is None and r["partner_decision"] == "keep":
            break
        skipped.append(f"{_name(r['partner'])} "
                       + (f"(different {r['blocked_by']}, kept apart by the guard)"
                          if r["blocked_by"] else "(itself excluded)"))
    passed = f"; earlier matches that did not count: {', '.join(skipped)}" if skipped else ""
    if dec.reason == "near_duplicate":
        return (f"Excluded in favour of {kept} (Jaccard {jaccard}, at or above the threshold) "
                f"because {kept} is the earliest kept sample it nearly duplicates: a later "
                f"near duplicate of a kept sample is excluded{passed}{after}.")
    if dec.reason == "unique":
        return f"Kept because no earlier sample of the pool nearly duplicates it{after}."
    if dec.reason == "guard_blocked":
        return (f"Kept because every earlier sample it nearly duplicates differs from it in "
                f"numbers or units, which the numeric/unit guard keeps apart{passed}{after}.")
    return (f"Kept because every earlier sample it nearly duplicates was itself excluded, and "
            f"a match with an excluded sample does not exclude (matches are not transitive)"
            f"{passed}{after}.")


def taken_down_why(relations: list[dict]) -> str:
    """Why a sample taken down is excluded: each takedown match, the first deciding."""
    down = [r for r in relations if "takedown" in r]
    parts = [f"taken down by request {r['takedown']['request_id']} "
             f"({'exact' if r['kind'] == 'exact' else 'near'} copy of "
             f"{r['takedown']['item']}, J={r['jaccard']:.4f})" for r in down]
    return (f"Excluded: {'; '.join(parts)}. A takedown applies in every split and scope, "
            f"whatever else the sample matches.")


def _diff_partner(kept: Key | None, relations: list[dict], excluded: list[dict]) -> Key | None:
    if kept is not None:
        return kept
    pool = [r for r in relations if not r["history_only"] and "takedown" not in r
            and _key(r["partner"])]
    for rows in ([r for r in pool if r["blocked_by"]], pool):
        if rows:
            return _key(rows[0]["partner"])
    if excluded:
        return (excluded[0]["package_id"], excluded[0]["sample_id"])
    return None


def _guard_row(rel: dict, guard, mine: SampleText | None, theirs: SampleText | None) -> dict:
    """Both sides' number and unit sequences of a guard-blocked relation, and the first index
    where each differs (None: equal, or a side is unavailable)."""

    def seqs(t: SampleText | None) -> dict | None:
        if t is None:
            return None
        numbers, units = guard.sequences(t.normalized)
        return {"numbers": list(numbers), "units": list(units)}

    a, b = seqs(mine), seqs(theirs)
    differ: dict[str, int | None] = {"numbers": None, "units": None}
    if a is not None and b is not None:
        differ = {n: _first_difference(tuple(a[n]), tuple(b[n])) for n in differ}
    return {"partner": rel["partner"], "history_only": rel["history_only"],
            "blocked_by": rel["blocked_by"], "jaccard": rel["jaccard"],
            "sequences": {"sample": a, "partner": b}, "numbers_differ_at": differ["numbers"],
            "units_differ_at": differ["units"],
            "recomputed_blocked_by": guard.blocked_by(mine.normalized, theirs.normalized)
            if mine is not None and theirs is not None else None}
