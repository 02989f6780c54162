"""`report explain` and `report diff` of contamination reports: every flag of one eval item or
training sample with its figures and matched texts, and the items newly contaminated or
cleared per eval package (benchmark) between two reports."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from near_dedup_core.contamination.verify import (
    pair_lines,
    set_aside_lines,
    verify_contamination,
)
from near_dedup_core.errors import NearDedupError


@dataclass
class ContaminationExplanation:
    """The pairs and set-aside lines of one eval item or training sample."""

    report: Path
    package_id: str
    sample_id: str
    role: str  # "eval" or "training"
    pairs: list[dict]
    set_aside: list[dict]
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"report": str(self.report), "package_id": self.package_id,
                "sample_id": self.sample_id, "role": self.role, "pairs": self.pairs,
                "set_aside": self.set_aside}

    def text(self) -> str:
        who = "eval item" if self.role == "eval" else "training sample"
        out = [f"{who} {self.package_id}/{self.sample_id} in contamination report "
               f"{self.report}: {len(self.pairs)} pair(s) of contamination, "
               f"{len(self.set_aside)} set aside"]
        for p in self.pairs:
            e, t = p["eval"], p["training"]
            out += ["",
                    f"eval {e['package_id']}/{e['sample_id']} ({e['file']}:{e['line']}, "
                    f"{p.get('field', 'text')}) in training {t['package_id']}/"
                    f"{t['sample_id']} ({t['file']}:{t['line']}, domain {t['domain']})"]
            if "method" not in p:
                out.append(f"  containment {p['containment']:.4f} = {p['common_shingles']} / "
                           f"{p['item_shingles']} shingles; span [{p['span']['start']}, "
                           f"{p['span']['end']}) (a format 1 report: no matched texts)")
                continue
            unit = "words" if p["method"] == "exact" else "shingles"
            how = ("exact run of the item's whole words" if p["method"] == "exact" else
                   "containment of the item's shingles in one nearly contiguous span")
            out += [f"  method: {p['method']} ({how}); {p['common_shingles']} of "
                    f"{p['item_shingles']} {unit} = {p['containment']:.4f}; numbers "
                    f"{'differ' if p['numbers_differ'] else 'the same'}",
                    f"  item     [{p['item_span']['start']}, {p['item_span']['end']}): "
                    f"{p['item_text']!r}",
                    f"  training [{p['span']['start']}, {p['span']['end']}): "
                    f"{p['training_text']!r}"]
        for a in self.set_aside:
            e, x = a["eval"], a["example"]
            why = (f"allowlist entry {a['allowlist_entry']}" if a["reason"] == "allowlist"
                   else "a template of the pool, with a word changed" if a["reason"] ==
                   "template" else "common in the pool")
            out += ["", f"set aside: eval {e['package_id']}/{e['sample_id']} ({a['field']}): "
                        f"{why}, in {a['training_samples']} training sample(s), first "
                        f"{x['package_id']}/{x['sample_id']}: {a['training_text']!r}"]
        return "\n".join(out)


def explain_contamination(report: str | Path, package_id: str, sample_id: str
                          ) -> ContaminationExplanation:
    """Every pair and set-aside line of one eval item (an eval package's sample) or one
    training sample (an input's), from a verified report."""
    report = Path(report)
    verified = verify_contamination(report)
    model = verified.model
    evals = {e.package_id for e in model.evals}
    inputs = {i.package_id for i in model.inputs}
    if package_id not in evals | inputs:
        raise NearDedupError(f"contamination report {report}: no eval or input package "
                             f"{package_id!r} (evals: {', '.join(sorted(evals))}; inputs: "
                             f"{', '.join(sorted(inputs))})")
    role = "eval" if package_id in evals else "training"
    key = (package_id, sample_id)
    pairs = [line.model_dump(mode="json") for line in pair_lines(report)
             if (line.eval if role == "eval" else line.training).package_id == package_id
             and (line.eval if role == "eval" else line.training).sample_id == sample_id]
    aside = [a.model_dump(mode="json") for a in set_aside_lines(report)
             if (role == "eval" and (a.eval.package_id, a.eval.sample_id) == key)
             or (role == "training" and (a.example.package_id, a.example.sample_id) == key)]
    return ContaminationExplanation(report, package_id, sample_id, role, pairs, aside)


@dataclass
class ContaminationDiff:
    """Per eval package (benchmark): items newly contaminated and items cleared."""

    old: Path
    new: Path
    benchmarks: list[dict]
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"old": str(self.old), "new": str(self.new), "benchmarks": self.benchmarks}

    def text(self, limit: int) -> str:
        out = [f"contamination reports {self.old} → {self.new}"]
        for b in self.benchmarks:
            out.append(f"\n{b['package_id']}: {b['leaked_old']:,} → {b['leaked_new']:,} items "
                       f"leaked; {len(b['newly_contaminated']):,} newly contaminated, "
                       f"{len(b['cleared']):,} cleared")
            for name in ("newly_contaminated", "cleared"):
                for sid in b[name][:limit]:
                    out.append(f"  {'+' if name == 'newly_contaminated' else '-'} {sid}")
                if len(b[name]) > limit:
                    out.append(f"  … {len(b[name]) - limit:,} more (--json lists all)")
        return "\n".join(out)


def _leaked(report: Path) -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for line in pair_lines(report):
        out[line.eval.package_id].add(line.eval.sample_id)
    return out


def diff_contamination(old: str | Path, new: str | Path) -> ContaminationDiff:
    """The items leaked in ``new`` and not in ``old`` (newly contaminated) and the reverse
    (cleared), per eval package of either report, in the new report's order and then the
    old's; both reports verified first."""
    old, new = Path(old), Path(new)
    models = [verify_contamination(old).model, verify_contamination(new).model]
    order = list(dict.fromkeys([e.package_id for e in models[1].evals] +
                               [e.package_id for e in models[0].evals]))
    a, b = _leaked(old), _leaked(new)
    benchmarks = [{"package_id": pid, "leaked_old": len(a[pid]), "leaked_new": len(b[pid]),
                   "newly_contaminated": sorted(b[pid] - a[pid]),
                   "cleared": sorted(a[pid] - b[pid])} for pid in order]
    return ContaminationDiff(old, new, benchmarks)


def dumps(result: ContaminationExplanation | ContaminationDiff) -> str:
    return orjson.dumps(result.to_json(), option=orjson.OPT_INDENT_2).decode()
