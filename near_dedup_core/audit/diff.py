"""`report diff`: what changed between two frozen reports (e.g. yesterday's and today's).

Samples are matched by (package_id, sample_id). For a sample in both reports:

- ``newly_excluded``: kept in the old report, excluded in the new one;
- ``newly_kept``: excluded in the old report, kept in the new one;
- ``changed_kept``: excluded in both, but the kept sample it is excluded in favour of (or
  its reason) changed.

Samples in only one report are ``only_old`` / ``only_new`` (a day's new packages are all
``only_new``). So contents are matched too, by (content_id, split): ``contents`` says which
contents changed decision, reason or kept partner (by content) between the two reports and
which are new or gone, by domain and reason (`_content_diff`). Every list is sorted.
Both reports are verified first and must hold the same kind of data. A change of config fingerprint, algorithm version or any config parameter is
reported first (``config_changed``): decisions of reports under different configs differ for
that reason alone. ``counts`` tallies both reports and the changes by split, domain and
package, plus the relations and the history-only relations that are new (a (sample, matched
content) pair the old report did not have).

Memory: the old report's decisions are held as one small tuple per sample; the new report
and both relations files are streamed. Domains are read from the input packages (a
package that is gone counts with domain None, and a note says so).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from near_dedup_core.audit.rates import ReportCounts, Tally, report_domains
from near_dedup_core.audit.sources import Domains, Key
from near_dedup_core.errors import NearDedupError
from near_dedup_core.formats.report import (
    DecisionRow,
    ReportManifest,
    decision_rows,
    relation_rows,
)
from near_dedup_core.report import verify_report

LISTS = ("newly_excluded", "newly_kept", "changed_kept", "only_old", "only_new")
CHANGES = ("newly_excluded", "newly_kept", "changed_kept")
#: The lists of contents (matched by content_id within a split).
CONTENT_LISTS = ("newly_excluded", "newly_kept", "changed", "gone", "new")
ContentKey = tuple[str, str]  # (content_id, split)


class _Old(NamedTuple):
    split: str
    decision: str
    reason: str
    kept: Key | None


def _kept(d: DecisionRow) -> Key | None:
    return d.kept.key if d.kept is not None else None


def _ref(k: Key | None) -> dict | None:
    return {"package_id": k[0], "sample_id": k[1]} if k else None


class _Content(NamedTuple):
    """A content's outcome in one report: its kept sample's decision if it has one, else the
    exclusion its samples share (all of them go to the same kept sample)."""

    sample: Key  # the sample shown for it: its kept sample, else its first line
    decision: str
    reason: str
    kept: Key | None
    jaccard: float | None


class _Contents:
    """The contents of one report, built one decision at a time."""

    def __init__(self) -> None:
        self.by_key: dict[ContentKey, _Content] = {}

    def add(self, d: DecisionRow) -> None:
        ck = (d.content_id, d.split)
        if d.decision == "keep":
            self.by_key[ck] = _Content(d.key, d.decision, d.reason, None, None)
        elif ck not in self.by_key:
            self.by_key[ck] = _Content(d.key, d.decision, d.reason, _kept(d), d.jaccard)

    def kept_contents(self, report: Path) -> dict[Key, str]:
        """content_id of every sample an excluded content is excluded for (one more pass)."""
        wanted = {c.kept for c in self.by_key.values() if c.kept is not None}
        return {d.key: d.content_id for d in _decisions(report) if d.key in wanted}


@dataclass
class ReportDiff:
    old: Path
    new: Path
    config_changed: dict
    lists: dict[str, list[dict]]
    counts: dict
    notes: list[str] = field(default_factory=list)
    contents: dict = field(default_factory=dict)
    #: when either report applied takedowns (format 2): `_takedown_change`
    takedowns: dict | None = None

    def to_json(self) -> dict:
        return {"config_changed": self.config_changed, **self.lists,
                "contents": self.contents, "counts": self.counts,
                **({"takedowns": self.takedowns} if self.takedowns is not None else {})}


def _takedown_change(old: ReportManifest, new: ReportManifest) -> dict | None:
    """The takedowns each report applied (request id -> samples it took down), those the new
    one applies that the old did not (``added``) and those no longer applied (``gone``: lifted
    since, or recorded after the old report); None when neither applied any."""
    if old.takedowns is None and new.takedowns is None:
        return None
    o = {t.request_id: t.samples for t in old.takedowns or ()}
    n = {t.request_id: t.samples for t in new.takedowns or ()}
    return {"old": o, "new": n, "added": sorted(set(n) - set(o)),
            "gone": sorted(set(o) - set(n))}


def _config_change(old: ReportManifest, new: ReportManifest) -> dict:
    co, cn = old.config.model_dump(mode="json"), new.config.model_dump(mode="json")
    params = {k: {"old": co.get(k), "new": cn.get(k)}
              for k in sorted(set(co) | set(cn)) if co.get(k) != cn.get(k)}
    out: dict = {"changed": (old.config_fingerprint != new.config_fingerprint
                             or old.algorithm_version != new.algorithm_version
                             or bool(params))}
    for name in ("config_fingerprint", "algorithm_version", "tool_version"):
        out[name] = {"old": getattr(old, name), "new": getattr(new, name)}
    out["parameters"] = params
    return out


def _decisions(report: Path) -> Iterator[DecisionRow]:
    return (d for _, d in decision_rows(report))


def _history_only(report: Path) -> tuple[int, set[tuple[str, str, str]]]:
    n = 0
    pairs: set[tuple[str, str, str]] = set()
    for n, r in relation_rows(report):
        if r.history_only:
            pairs.add((r.sample.package_id, r.sample.sample_id, r.match.content_id))
    return n, pairs


def diff_reports(old: str | Path, new: str | Path, *, old_domains: Domains | None = None,
                 new_domains: Domains | None = None) -> ReportDiff:
    """Compare two reports; both are verified first (`report.verify_report`) and must be of
    the same kind of data (CPT or SFT)."""
    old, new = Path(old), Path(new)
    mo, mn = verify_report(old).model, verify_report(new).model
    kinds = [m.kinds for m in (mo, mn)]
    if kinds[0] != kinds[1]:
        raise NearDedupError(f"report {new}: its inputs are {'/'.join(kinds[1])} packages, "
                             f"those of report {old} {'/'.join(kinds[0])}: reports of "
                             f"different kinds of data cannot be compared")
    dom_o = report_domains(old, mo) if old_domains is None else old_domains
    if new_domains is None:
        # the same packages (id and manifest sha256) give the same domains: read them once
        same = {(i.package_id, i.manifest_sha256, i.path) for i in mn.inputs} <= \
            {(i.package_id, i.manifest_sha256, i.path) for i in mo.inputs}
        new_domains = dom_o if same and old_domains is None else report_domains(new, mn)
    dom_n = new_domains
    counts_o, counts_n = ReportCounts(), ReportCounts()
    change: dict[str, dict[object, dict[str, int]]] = {
        g: defaultdict(lambda: dict.fromkeys(LISTS, 0)) for g in ("split", "domain", "package")}
    lists: dict[str, list[dict]] = {name: [] for name in LISTS}

    def tally(name: str, key: Key, split: str, domain: str | None) -> None:
        for group, value in (("split", split), ("domain", domain), ("package", key[0])):
            change[group][value][name] += 1

    before: dict[Key, _Old] = {}
    cont_o, cont_n = _Contents(), _Contents()
    for d in _decisions(old):
        key = d.key
        before[key] = _Old(d.split, d.decision, d.reason, _kept(d))
        counts_o.add(d, dom_o.of(key))
        cont_o.add(d)
    for d in _decisions(new):
        key = d.key
        domain = dom_n.of(key)
        counts_n.add(d, domain)
        cont_n.add(d)
        was = before.pop(key, None)
        item = {"package_id": key[0], "sample_id": key[1], "split": d.split}
        if was is None:
            lists["only_new"].append({**item, "decision": d.decision, "reason": d.reason})
            tally("only_new", key, d.split, domain)
            continue
        now = _Old(d.split, d.decision, d.reason, _kept(d))
        if was.decision == "keep" and now.decision == "exclude":
            name = "newly_excluded"
        elif was.decision == "exclude" and now.decision == "keep":
            name = "newly_kept"
        elif now.decision == "exclude" and (was.kept, was.reason) != (now.kept, now.reason):
            name = "changed_kept"
        else:
            continue
        lists[name].append({**item,
                            "old": {"decision": was.decision, "reason": was.reason,
                                    "kept": _ref(was.kept)},
                            "new": {"decision": now.decision, "reason": now.reason,
                                    "kept": _ref(now.kept)}})
        tally(name, key, d.split, domain)
    for key, was in before.items():  # in the old report's order
        lists["only_old"].append({"package_id": key[0], "sample_id": key[1], "split": was.split,
                                  "decision": was.decision, "reason": was.reason})
        tally("only_old", key, was.split, dom_o.of(key))

    rel_o, hist_o = _history_only(old)
    rel_n, hist_n = _history_only(new)
    counts = {
        "total": {"old": counts_o.total.to_json(), "new": counts_n.total.to_json(),
                  **{name: len(lists[name]) for name in LISTS}},
        "by_split": _rows("split", counts_o.by_split, counts_n.by_split, change["split"]),
        "by_domain": _rows("domain", counts_o.by_domain, counts_n.by_domain, change["domain"]),
        "by_package": _rows("package", counts_o.by_package, counts_n.by_package,
                            change["package"]),
        "relations": {"old": rel_o, "new": rel_n, "history_only_old": len(hist_o),
                      "history_only_new": len(hist_n),
                      "new_history_only": len(hist_n - hist_o)},
        "domains_unknown_for": sorted({p.package_id for p in (*dom_o.missing, *dom_n.missing)}),
    }
    for items in lists.values():
        items.sort(key=lambda it: (it["package_id"], it["sample_id"]))
    contents = _content_diff(cont_o, cont_n, cont_o.kept_contents(old),
                             cont_n.kept_contents(new), dom_o, dom_n)
    notes = [p.problem for p in (*dom_o.missing, *dom_n.missing) if p.problem]
    notes = list(dict.fromkeys(notes))
    if notes:
        notes.append("samples of these packages are counted with domain null")
    return ReportDiff(old, new, _config_change(mo, mn), lists, counts, notes, contents,
                      _takedown_change(mo, mn))


def _content_diff(old: _Contents, new: _Contents, kept_o: dict[Key, str],
                  kept_n: dict[Key, str], dom_o: Domains, dom_n: Domains) -> dict:
    """The contents of both reports matched by (content_id, split): which changed decision,
    kept partner (by content: the partner's sample ids differ from day to day) or reason,
    which are new and which are gone; counted by domain and by (domain, reason)."""

    def side(c: _Content, kept: dict[Key, str]) -> dict:
        ref = None if c.kept is None else {"package_id": c.kept[0], "sample_id": c.kept[1],
                                           "content_id": kept[c.kept]}
        return {"decision": c.decision, "reason": c.reason, "kept": ref, "jaccard": c.jaccard,
                "sample": {"package_id": c.sample[0], "sample_id": c.sample[1]}}

    lists: dict[str, list[dict]] = {name: [] for name in CONTENT_LISTS}
    by_domain: dict[str | None, dict[str, int]] = defaultdict(
        lambda: dict.fromkeys(CONTENT_LISTS, 0))
    by_reason: dict[tuple[str | None, str], dict[str, int]] = defaultdict(
        lambda: {"new": 0, "gone": 0})
    for ck in sorted(old.by_key.keys() | new.by_key.keys()):
        was, now = old.by_key.get(ck), new.by_key.get(ck)
        item: dict = {"content_id": ck[0], "split": ck[1]}
        if was is None or now is None:
            c, kept, dom, name = ((now, kept_n, dom_n, "new") if was is None
                                  else (was, kept_o, dom_o, "gone"))
            assert c is not None
            domain = dom.of(c.sample)
            lists[name].append({**item, "domain": domain, **side(c, kept)})
            by_domain[domain][name] += 1
            by_reason[(domain, c.reason)][name] += 1
            continue
        kept_was = kept_o[was.kept] if was.kept is not None else None
        kept_now = kept_n[now.kept] if now.kept is not None else None
        if was.decision != now.decision:
            name = "newly_excluded" if now.decision == "exclude" else "newly_kept"
        elif (was.reason, kept_was) != (now.reason, kept_now):
            name = "changed"
        else:
            continue
        domain = dom_n.of(now.sample)
        lists[name].append({**item, "domain": domain, "old": side(was, kept_o),
                            "new": side(now, kept_n)})
        by_domain[domain][name] += 1
    both = len(old.by_key.keys() & new.by_key.keys())
    return {**lists, "counts": {
        "old_contents": len(old.by_key), "new_contents": len(new.by_key), "in_both": both,
        **{name: len(lists[name]) for name in CONTENT_LISTS},
        "by_domain": [{"domain": d, **by_domain[d]} for d in _domain_order(by_domain)],
        "new_or_gone_by_reason": [
            {"domain": d, "reason": r, **by_reason[(d, r)]}
            for d in _domain_order({d for d, _ in by_reason})
            for r in sorted(r for dd, r in by_reason if dd == d)]}}


def _domain_order(domains: Iterable[str | None]) -> list[str | None]:
    """Domains sorted by name, unknown (None) last."""
    return sorted(domains, key=lambda d: (d is None, d or ""))


def _rows(group: str, old: dict, new: dict, change: dict) -> list[dict]:
    names = sorted(set(old) | set(new), key=lambda n: (n is None, n or ""))
    return [{group: n, "old": old.get(n, Tally()).to_json(), "new": new.get(n, Tally()).to_json(),
             **{k: change.get(n, {}).get(k, 0) for k in LISTS}} for n in names]
