"""The eval side: eval packages opened and checked, every record an item (its compared text
normalized), and where each sample is (`SampleRef`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from near_dedup_core.compare import compared_text
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.errors import LimitExceeded, NearDedupError, where
from near_dedup_core.normalize import normalize
from near_dedup_core.package import Package, Record, load_package, open_packages, stream_records
from near_dedup_core.progress import Progress


@dataclass(frozen=True, slots=True)
class SampleRef:
    """Where a sample is: input package position, record position, and its identity."""

    input_pos: int
    position: int
    package_id: str
    sample_id: str
    split: str
    file: str
    line: int
    domain: str | None

    def key(self) -> tuple[int, int]:
        return (self.input_pos, self.position)


@dataclass(frozen=True, slots=True)
class EvalItem:
    ref: SampleRef
    text: str  # normalized
    field: str = "text"  # what of the record it is (`FIELDS`)


#: what of an eval record is an item: a cpt record's ``text``, and with ``choices`` also its
#: text followed by its choices (one per line); an sft record's messages
FIELDS = ("text", "text+choices", "messages")


def _choices(rec: Record) -> list[str] | None:
    choices = rec.data.get("choices")
    if choices is None:
        return None
    if type(choices) is not list or not all(type(c) is str for c in choices):
        raise NearDedupError(f"{where(rec.package_id, rec.file, rec.line)}: field 'choices' "
                             f"of an eval record must be a list of strings")
    return choices


def _resolved(records: Iterator[Record], packages: Sequence[Package], kind: str,
              config: NearDedupConfig, text_of) -> Iterator[tuple[Record, str, str | None]]:
    """(record, compared text, domain) with refs resolved; ``max_chars`` checked."""
    depended = {d for p in packages for d in p.depends_on}
    targets: dict[tuple[str, str], tuple[str, str | None]] = {}
    for rec in records:
        domain = rec.data.get("domain")
        if rec.ref is not None:
            raw, target_domain = targets[rec.ref]
            if domain is None:
                domain = target_domain
        else:
            raw = text_of(rec.data)
            if len(raw) > config.max_chars:
                raise LimitExceeded(
                    f"{where(rec.package_id, rec.file, rec.line)}: sample {rec.sample_id} has "
                    f"{len(raw):,} characters, over max_chars {config.max_chars:,}")
        if rec.package_id in depended:
            targets[(rec.package_id, rec.sample_id)] = (raw, domain)
        yield rec, raw, domain


def text_reader(item_kind: str, pool_kind: str):
    if item_kind == "sft" and pool_kind == "cpt":
        return lambda data: "\n".join(m["content"] for m in data["messages"])
    return lambda data: compared_text(item_kind, data)


def open_evals(paths: Sequence[str | Path]) -> list[Package]:
    """Eval packages in the order given; each kind's packages are checked together like one
    command's inputs (unique ids, depends_on among them)."""
    if not paths:
        raise NearDedupError("no eval packages given")
    kind_of = {p: load_package(p).kind for p in paths}
    by_path: dict[str | Path, Package] = {}
    for kind in dict.fromkeys(kind_of.values()):
        group = [p for p in paths if kind_of[p] == kind]
        by_path.update(zip(group, open_packages(group), strict=True))
    packages = [by_path[p] for p in paths]
    seen: dict[str, Package] = {}
    for pkg in packages:
        if pkg.package_id in seen:
            raise NearDedupError(f"{where(pkg.package_id)}: package id given twice "
                                 f"({seen[pkg.package_id].path} and {pkg.path})")
        seen[pkg.package_id] = pkg
    return packages


def read_items(evals: list[Package], pool_kind: str, config: NearDedupConfig,
               progress: bool) -> tuple[list[EvalItem], Counter, Counter]:
    """Every eval record's items (`FIELDS`) in (eval package, record) order; counts of
    records and of records with nothing to find (a short text without a letter: a number
    alone is no item) per eval package."""
    from near_dedup_core.contamination.probe import has_letter

    pos = {p.package_id: i for i, p in enumerate(evals)}
    items: list[EvalItem] = []
    total: Counter = Counter()
    skipped: Counter = Counter()
    bar = Progress("contamination: eval items", sum(p.record_count for p in evals),
                   enabled=progress)
    for kind in sorted({p.kind for p in evals}):
        group = [p for p in evals if p.kind == kind]
        reader = text_reader(kind, pool_kind)
        for rec, raw, domain in _resolved(stream_records(group), group, kind, config, reader):
            bar.advance()
            total[rec.package_id] += 1
            norm = normalize(raw)
            ref = SampleRef(pos[rec.package_id], rec.position, rec.package_id, rec.sample_id,
                            rec.split, rec.file, rec.line, domain)
            if len(norm) < config.contamination_min_chars and not has_letter(norm):
                skipped[rec.package_id] += 1
                continue
            if kind == "sft":
                items.append(EvalItem(ref, norm, "messages"))
                continue
            items.append(EvalItem(ref, norm))
            choices = _choices(rec) if rec.ref is None else None
            if choices:
                items.append(EvalItem(ref, normalize("\n".join([raw, *choices])),
                                      "text+choices"))
    bar.finish()
    items.sort(key=lambda it: (it.ref.key(), FIELDS.index(it.field)))
    return items, total, skipped
