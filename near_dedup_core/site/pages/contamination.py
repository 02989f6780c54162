"""The contamination pages (``contamination/index.html``, with ``report html
--contamination``): the contamination report's pairs, the first `MAX_CONTAMINATION_TEXTS`
with the training text and the eval item's span highlighted."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from near_dedup_core.audit.sources import (
    InputPackage,
    Key,
    SampleText,
    input_packages,
    read_lines,
    read_samples,
)
from near_dedup_core.compare import compared_text
from near_dedup_core.contamination import ContaminationSummary, pair_lines
from near_dedup_core.contamination.report import EvalRef
from near_dedup_core.contamination.verify import read_summary, set_aside_lines
from near_dedup_core.normalize import normalize
from near_dedup_core.report import OriginRow
from near_dedup_core.site import views
from near_dedup_core.site.render import Writer

CONTAMINATION_PER_PAGE = 50
#: Contaminated pairs shown with the training text and the item's span highlighted.
MAX_CONTAMINATION_TEXTS = 500


def write(w: Writer, contam: ContaminationSummary, report: Path) -> None:
    path, manifest = contam.path, contam.model
    lines = list(pair_lines(path))
    summary = read_summary(path)
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
               limit=MAX_CONTAMINATION_TEXTS, set_aside=set_aside_lines(path),
               allowlist=getattr(manifest, "allowlist", []))


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
