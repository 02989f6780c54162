"""Which records of a built mixture the takedowns in force in an index take down now
(`takedown check MIXTURE…`, the release's blocking check ``no_taken_down_content``).

`mixture verify` proves from the mixture alone that no sample its embedded report took down
is in it. A takedown recorded after that report was frozen is not in the report; this check
reads the takedowns in force in the index and compares every record's compared text with
them, by the scan's rule (`near_dedup_core.takedown.match.texts_taken_down`)."""

from __future__ import annotations

from pathlib import Path

from near_dedup_core import index_store as db
from near_dedup_core.compare import compared_text
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.errors import NearDedupError
from near_dedup_core.formats.takedown import TakedownAct
from near_dedup_core.fsutil import iter_json_objects, read_model
from near_dedup_core.mixture.formats import MixtureManifest
from near_dedup_core.takedown.match import texts_taken_down
from near_dedup_core.takedown.record import in_force, read_acts
from near_dedup_core.wording import count

#: Records whose texts are compared per call.
RECORDS_PER_CALL = 20_000


def check_mixture_takedowns(path: Path, index: db.Index) -> str:
    """The summary line when no record of the mixture at ``path`` is a text, or a near copy
    of a text, that a takedown in force in ``index`` takes down; else NearDedupError naming
    the first such record, its request and its Jaccard."""
    label = f"mixture {path}"
    if not path.is_dir():
        raise NearDedupError(f"{label}: not a directory")
    acts, config = read_acts(index)
    acts = in_force(acts)
    manifest = read_model(path / "manifest.json", MixtureManifest, label)
    records = 0
    for entry in manifest.files:
        pending: list[tuple[int, str, str]] = []  # (line, sample, compared text)
        for n, obj in iter_json_objects(path, entry.path, label):
            records += 1
            origin = obj.get("origin") or {}
            try:
                text = compared_text(manifest.kind, obj)
            except (KeyError, TypeError):
                raise NearDedupError(f"{label}: {entry.path}:{n}: the record has no "
                                     f"{manifest.kind} text") from None
            pending.append((n, f"{origin.get('package_id')}/{origin.get('sample_id')}", text))
            if len(pending) >= RECORDS_PER_CALL:
                _refuse_taken_down(label, entry.path, pending, acts, config)
                pending = []
        _refuse_taken_down(label, entry.path, pending, acts, config)
    return (f"{label}: no taken-down content ({count(records, 'record')} against "
            f"{count(len(acts), 'takedown')} in force in index {index.label})")


def _refuse_taken_down(label: str, rel: str, pending: list[tuple[int, str, str]],
                       acts: list[TakedownAct], config: NearDedupConfig) -> None:
    hits = texts_taken_down([t for _, _, t in pending], acts, config)
    if hits:
        h = hits[0]
        n, sample, _ = pending[h.text]
        raise NearDedupError(f"{label}: {rel}:{n}: sample {sample} is taken down by request "
                             f"{h.request_id} (copy of {h.item}, J={h.jaccard:.4f}); rebuild "
                             f"the mixture from a new scan")
