"""Plain-text rendering of `Explanation` and `ReportDiff` for the terminal (the CLI prints it)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from near_dedup_core.audit.diff import CHANGES, CONTENT_LISTS, LISTS, ReportDiff
from near_dedup_core.audit.explain import Explanation
from near_dedup_core.audit.textdiff import Span, merge_close, show_span

MAX_SPANS = 20


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], indent: str = "  ") -> str:
    def cell(v: object) -> str:
        if v is None:
            return "-"
        if isinstance(v, bool):
            return "yes" if v else "no"
        if isinstance(v, float):
            return f"{v:.4f}"
        if isinstance(v, int):
            return f"{v:,}"
        return str(v)

    cells = [[cell(v) for v in r] for r in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    numeric = [bool(rows) and all(isinstance(r[i], (int, float)) and not isinstance(r[i], bool)
                                  for r in rows) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        return indent + "  ".join(v.rjust(w) if n else v.ljust(w)
                                  for v, w, n in zip(values, widths, numeric, strict=False)).rstrip()

    return "\n".join([line(list(headers)), *(line(r) for r in cells)])


def _name(ref: dict | None) -> str:
    if not ref:
        return "-"
    if ref.get("package_id") is None:
        return f"(history) content {str(ref.get('content_id'))[:12]}…"
    return f"{ref['package_id']}/{ref['sample_id']}"


def _where(rec: dict) -> str:
    parts = [p for p in (rec.get("split"),
                         f"{rec['file']}:{rec['line']}" if rec.get("file") else None,
                         f"domain {rec['domain']}" if rec.get("domain") else None) if p]
    return ", ".join(parts)


def _source(rec: dict) -> str:
    src = rec.get("source")
    return "-" if src is None else json.dumps(src, ensure_ascii=False, sort_keys=True)


def _decision(r: dict) -> str:
    """A relation partner's own decision, e.g. ``exclude (near_duplicate of cpt-v1/web-0021)``."""
    if "takedown" in r:
        return f"(taken down by {r['takedown']['request_id']})"
    if r["partner_decision"] is None:
        return "(history)"
    kept = f" of {_name(r['partner_kept'])}" if r["partner_kept"] else ""
    return f"{r['partner_decision']} ({r['partner_reason']}{kept})"


def _partner(r: dict) -> str:
    """A relation's partner: a pool sample, history content, or a taken-down text."""
    if "takedown" in r:
        return f"(takedown) {r['takedown']['item']}"
    return _name(r["partner"])


def _seq(values: list[str] | None) -> str:
    if values is None:
        return "(text not available)"
    return " ".join(values) if values else "(none)"


def explanation_text(e: Explanation) -> str:
    s = e.sample
    out = [f"sample    {_name(s)}  ({_where(s)})",
           f"source    {_source(s)}",
           f"decision  {e.decision} ({e.reason})"]
    if e.kept is not None:
        out.append(f"kept      {_name(e.kept)}  ({_where(e.kept)}), jaccard {e.jaccard:.4f}")
        out.append(f"          source {_source(e.kept)}")
    out.append(f"why       {e.why}")
    out.append(f"\nrelations ({len(e.relations)})")
    if e.relations:
        # history sources only when a relation has any (pool-only reports have none)
        sources = any(r["match_sources"] for r in e.relations)
        out.append(table(
            ["listed as", "partner", "partner's decision", "kind", "jaccard", "history-only",
             "blocked by", *(["history sources"] if sources else [])],
            [[r["listed_as"], _partner(r), _decision(r), r["kind"], r["jaccard"],
              r["history_only"], r["blocked_by"],
              *([", ".join(f"{m['package_id']}/{m['sample_id']}"
                           for m in r["match_sources"][:3])
                 + (" …" if len(r["match_sources"]) > 3 else "")] if sources else [])]
             for r in e.relations]))
    if e.guard:
        out.append(f"\nguard-blocked ({len(e.guard)})")
        for g in e.guard:
            out.append(f"  {_name(g['partner'])}: blocked by {g['blocked_by']}, "
                       f"jaccard {g['jaccard']:.4f}")
            for side, label in (("sample", "this sample"), ("partner", "partner")):
                seqs = g["sequences"][side]
                out.append(f"    {label:<12} numbers {_seq(seqs and seqs['numbers'])}")
                out.append(f"    {'':<12} units   {_seq(seqs and seqs['units'])}")
            for n in ("numbers", "units"):
                i = g[f"{n}_differ_at"]
                if i is not None:
                    mine, theirs = g["sequences"]["sample"][n], g["sequences"]["partner"][n]
                    a = mine[i] if i < len(mine) else "(end)"
                    b = theirs[i] if i < len(theirs) else "(end)"
                    out.append(f"    first difference: {n}[{i}]: {a} vs {b}")
    if e.excluded_because_of_it:
        out.append(f"\nexcluded because of it ({len(e.excluded_because_of_it)})")
        out.append(table(["sample", "split", "reason", "jaccard"],
                         [[_name(x), x["split"], x["reason"], x["jaccard"]]
                          for x in e.excluded_because_of_it]))
    if e.diff_partner is not None and e.texts:
        partner, mine = e.texts["partner"], e.texts["sample"]
        out.append(f"\ntext diff: {_name(e.diff_partner)} [-…-] → this sample {{+…+}} "
                   f"({len(e.diff)} changed span{'s' if len(e.diff) != 1 else ''}, normalized)")
        if not e.diff:
            out.append("  the normalized texts are identical")
        shown = merge_close(partner, mine, [Span(**d) for d in e.diff])
        for span in shown[:MAX_SPANS]:
            out.append("  " + show_span(partner, mine, span))
        if len(shown) > MAX_SPANS:
            out.append(f"  … {len(shown) - MAX_SPANS} more (see --json)")
    return "\n".join(out)


def diff_text(d: ReportDiff, limit: int) -> str:
    c = d.config_changed
    out = [f"old  {d.old}", f"new  {d.new}"]
    if c["changed"]:
        out.append("config CHANGED: decisions may differ for that reason alone")
        for name, width in (("config_fingerprint", 12), ("algorithm_version", 40)):
            if c[name]["old"] != c[name]["new"]:
                out.append(f"  {name}: {str(c[name]['old'])[:width]} → "
                           f"{str(c[name]['new'])[:width]}")
        for name, v in c["parameters"].items():
            out.append(f"  {name}: {json.dumps(v['old'])} → {json.dumps(v['new'])}")
    else:
        out.append(f"config unchanged (fingerprint {str(c['config_fingerprint']['new'])[:12]}…)")
    t = d.counts["total"]
    rel = d.counts["relations"]
    out.append("")
    out.append(table(["", "samples", "kept", "excluded", "excluded %"],
                     [[label, v["samples"], v["keep"], v["exclude"],
                       f"{100 * v['exclusion_rate']:.1f}%"]
                      for label, v in (("old", t["old"]), ("new", t["new"]))]))
    out.append("")
    out.append(table(["change", "samples"], [[n.replace("_", " "), t[n]] for n in LISTS]
                     + [["new history-only relations", rel["new_history_only"]]]))
    for group in ("split", "domain", "package"):
        rows = d.counts[f"by_{group}"]
        out.append("")
        out.append(table(
            [group, "old kept", "old excl.", "new kept", "new excl.", "+excluded", "+kept",
             "changed kept", "only old", "only new"],
            [[r[group] if r[group] is not None else "(unknown)", r["old"]["keep"],
              r["old"]["exclude"], r["new"]["keep"], r["new"]["exclude"],
              *(r[n] for n in (*CHANGES, "only_old", "only_new"))] for r in rows]))
    if d.takedowns is not None:
        td = d.takedowns
        out.append("")
        out.append(table(["takedown", "old samples", "new samples", ""],
                         [[r, td["old"].get(r, "-"), td["new"].get(r, "-"),
                           "added" if r in td["added"] else "gone" if r in td["gone"] else ""]
                          for r in sorted(set(td["old"]) | set(td["new"]))]))
    out.extend(_contents_text(d.contents, limit))
    for name in LISTS:
        items = d.lists[name]
        if not items:
            continue
        out.append(f"\n{name.replace('_', ' ')} ({len(items):,}"
                   f"{f', first {limit}' if len(items) > limit else ''})")
        rows = []
        for it in items[:limit]:
            if "old" in it:
                rows.append([f"{it['package_id']}/{it['sample_id']}", it["split"],
                             f"{it['old']['reason']} {_name(it['old']['kept'])}".replace(" -", ""),
                             f"{it['new']['reason']} {_name(it['new']['kept'])}".replace(" -", "")])
            else:
                rows.append([f"{it['package_id']}/{it['sample_id']}", it["split"],
                             it["decision"], it["reason"]])
        headers = (["sample", "split", "old", "new"] if "old" in items[0]
                   else ["sample", "split", "decision", "reason"])
        out.append(table(headers, rows))
    return "\n".join(out)


def _outcome(side: dict) -> str:
    kept = side["kept"]
    return side["reason"] + (f" of {kept['package_id']}/{kept['sample_id']} "
                             f"(content {kept['content_id'][:12]}…)" if kept else "")


def _contents_text(c: dict, limit: int) -> list[str]:
    """The contents part of `diff_text`: samples matched by content_id within a split."""
    n = c["counts"]
    out = ["", f"contents (matched by content_id within a split): old {n['old_contents']:,}, "
               f"new {n['new_contents']:,}, in both {n['in_both']:,}",
           table(["domain", "+excluded", "+kept", "changed", "gone", "new"],
                 [[r["domain"] if r["domain"] is not None else "(unknown)", r["newly_excluded"],
                   r["newly_kept"], r["changed"], r["gone"], r["new"]] for r in n["by_domain"]])]
    if n["new_or_gone_by_reason"]:
        out += ["", table(["domain", "reason", "new", "gone"],
                          [[r["domain"] if r["domain"] is not None else "(unknown)", r["reason"],
                            r["new"], r["gone"]] for r in n["new_or_gone_by_reason"]])]
    for name in CONTENT_LISTS:
        items = c[name]
        if not items:
            continue
        out.append(f"\ncontents {name.replace('_', ' ')} ({len(items):,}"
                   f"{f', first {limit}' if len(items) > limit else ''})")
        if "old" in items[0]:
            out.append(table(["content", "split", "domain", "old", "new"],
                             [[f"{it['content_id'][:12]}…", it["split"], it["domain"],
                               f"{_name(it['old']['sample'])}: {_outcome(it['old'])}",
                               f"{_name(it['new']['sample'])}: {_outcome(it['new'])}"]
                              for it in items[:limit]]))
        else:
            out.append(table(["content", "split", "domain", "sample", "decision"],
                             [[f"{it['content_id'][:12]}…", it["split"], it["domain"],
                               _name(it["sample"]), f"{it['decision']} ({_outcome(it)})"]
                              for it in items[:limit]]))
    return out
