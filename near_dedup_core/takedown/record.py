"""`takedown add`, `takedown lift`, `takedown list` and `takedown show`: the takedown log
kept in the index (`formats.takedown`), written in one transaction of the index's writer,
like a batch, and read from one snapshot.

What an add records of each text is its fingerprint under the index's config (the sha256 of
the normalized compared text, its MinHash signature and its hashed shingle set), never the
text unless ``keep_text`` asks for it. Nothing is ever removed: a lift is a new act.
"""

from __future__ import annotations

import getpass
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson
from pydantic import ValidationError

from near_dedup_core import index_store as db
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.errors import NearDedupError
from near_dedup_core.formats.takedown import (
    KEY_PREFIX,
    TakedownAct,
    TakedownItem,
    act_key,
    encode_shingles,
    encode_signature,
)
from near_dedup_core.fsutil import utc_now
from near_dedup_core.normalize import normalize
from near_dedup_core.wording import count


@dataclass(frozen=True)
class Text:
    """A text to take down, as given: its id within the request and its compared text."""

    id: str
    text: str


def default_by() -> str:
    """Who records an act when ``--by`` is not given: the operating system's user."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


# ---------------------------------------------------------------------- reading the log


def acts_of(meta: dict[str, str], label: str) -> list[TakedownAct]:
    """Every recorded act of an index's ``meta`` rows, in recorded order."""
    acts = []
    for key in sorted(k for k in meta if k.startswith(KEY_PREFIX)):
        try:
            act = TakedownAct.model_validate_json(meta[key])
        except ValidationError:
            raise NearDedupError(f"index {label}: meta {key} is not a takedown act; restore "
                                 f"the index from a backup") from None
        if act_key(act.seq) != key:
            raise NearDedupError(f"index {label}: meta {key} records act {act.seq}; restore "
                                 f"the index from a backup")
        acts.append(act)
    return acts


def in_force(acts: Sequence[TakedownAct]) -> list[TakedownAct]:
    """The adds that no later act lifted, in recorded order."""
    lifted = {a.request_id for a in acts if a.action == "lift"}
    return [a for a in acts if a.action == "add" and a.request_id not in lifted]


def read_acts(index: db.Index) -> tuple[list[TakedownAct], NearDedupConfig]:
    """The index's acts and config, from one snapshot."""
    with index.errors(), index.snapshot() as snap:
        meta = snap.meta()
    return acts_of(meta, index.label), _config(index.label, meta)


def _config(label: str, meta: dict[str, str]) -> NearDedupConfig:
    from near_dedup_core.index_store.check import check_meta

    return check_meta(label, meta)


# ---------------------------------------------------------------------- the texts


def texts_from_file(path: Path) -> list[Text]:
    """``--text FILE``: the file's whole UTF-8 text, named by the file's name."""
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise NearDedupError(f"takedown: {path} cannot be read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise NearDedupError(f"takedown: {path} is not UTF-8 text") from None
    if not text.strip():
        raise NearDedupError(f"takedown: {path} holds no text")
    return [Text(path.name, text)]


def texts_from_jsonl(path: Path) -> list[Text]:
    """``--jsonl FILE``: one ``{"id", "text"}`` (CPT) or ``{"id", "messages"}`` (SFT) per
    line; ids distinct."""
    from near_dedup_core.compare import qa_text

    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise NearDedupError(f"takedown: {path} cannot be read ({exc.strerror})") from None
    texts: list[Text] = []
    seen: set[str] = set()
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        loc = f"takedown: {path}:{n}"
        try:
            row = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise NearDedupError(f"{loc}: not valid JSON") from None
        if not isinstance(row, dict) or not isinstance(row.get("id"), str) or not row["id"]:
            raise NearDedupError(f"{loc}: expected an object with a string id")
        if set(row) == {"id", "text"} and isinstance(row["text"], str) and row["text"].strip():
            text = row["text"]
        elif set(row) == {"id", "messages"} and _messages(row["messages"]):
            text = qa_text(row["messages"])
        else:
            raise NearDedupError(f"{loc}: expected {{\"id\", \"text\"}} with a non-empty text "
                                 f"or {{\"id\", \"messages\"}} with role/content messages")
        if row["id"] in seen:
            raise NearDedupError(f"{loc}: id {row['id']!r} appears twice")
        seen.add(row["id"])
        texts.append(Text(row["id"], text))
    if not texts:
        raise NearDedupError(f"takedown: {path} holds no line")
    return texts


def _messages(value: object) -> bool:
    return isinstance(value, list) and bool(value) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str)
        and isinstance(m.get("content"), str) for m in value)


def texts_from_package(path: Path, sample_ids: Sequence[str]) -> list[Text]:
    """``--package DIR --sample ID…``: the compared texts of these samples of the package
    (validated as it is read), named ``PACKAGE/SAMPLE``."""
    from near_dedup_core.compare import compared_text
    from near_dedup_core.package import load_package
    from near_dedup_core.package.stream import NoSuchSample, SampleIsRef, read_samples

    if not sample_ids:
        raise NearDedupError("usage: takedown add --package needs --sample ID...")
    pkg = load_package(path)
    try:
        records = read_samples(pkg, sample_ids)
    except SampleIsRef as exc:
        raise NearDedupError(f"takedown: sample {exc.sample_id} of package {pkg.package_id} "
                             f"refers to sample {exc.ref[1]} of package {exc.ref[0]}; take "
                             f"that sample down instead") from None
    except NoSuchSample as exc:
        raise NearDedupError(f"takedown: package {pkg.package_id} has no sample "
                             f"{exc.sample_id!r}") from None
    return [Text(f"{pkg.package_id}/{s}", compared_text(pkg.kind, data))
            for s, data in records.items()]


def fingerprint(texts: Sequence[Text], config: NearDedupConfig,
                keep_text: bool) -> list[TakedownItem]:
    """Each text's `TakedownItem` under ``config``: the normalized text's sha256 and length,
    and for one of at least ``min_chars`` characters its stored MinHash signature and its
    hashed shingle set."""
    from near_dedup_core.signature import MinHasher, stored_values

    hasher = MinHasher(config.num_perm, config.seed, config.shingle_size)
    items = []
    for t in texts:
        norm = normalize(t.text)
        signature = shingles = None
        if len(norm) >= config.min_chars:
            signature = encode_signature(stored_values(hasher.signatures([norm]))[0])
            shingles = encode_shingles(hasher.shingle_set(norm))
        items.append(TakedownItem(id=t.id, text_sha256=hashlib.sha256(norm.encode()).hexdigest(),
                                  chars=len(norm), signature=signature, shingles=shingles,
                                  text=t.text if keep_text else None))
    return items


# ---------------------------------------------------------------------- the acts


def _record(index: db.Index, build) -> TakedownAct:
    """Append the act ``build(acts, config)`` makes from the log as the writer's
    transaction reads it (so two writers cannot both take one request id)."""
    with index.errors():
        with index.snapshot() as snap:  # refuses a location that holds no index
            config = _config(index.label, snap.meta())
        with index.batch(config, utc_now()) as batch:
            meta = batch.meta()
            act: TakedownAct = build(acts_of(meta, index.label), config)
            batch.add_takedown(act_key(act.seq), act.to_json())
    return act


def add(index: db.Index, request_id: str, reason: str, texts: Sequence[Text], *,
        by: str | None = None, keep_text: bool = False) -> TakedownAct:
    """Record the takedown of ``texts`` under ``request_id``; a request id recorded before
    (even lifted) is refused."""
    _check_words(request_id, reason)
    if not texts:
        raise NearDedupError("usage: takedown add needs --text FILE, --jsonl FILE or "
                             "--package DIR --sample ID...")

    def build(acts: list[TakedownAct], config: NearDedupConfig) -> TakedownAct:
        if any(a.request_id == request_id for a in acts):
            raise NearDedupError(f"takedown: request {request_id} is recorded already in "
                                 f"index {index.label}; a request id is used once")
        return TakedownAct(seq=len(acts) + 1, action="add", request_id=request_id,
                           at=utc_now(), by=by or default_by(), reason=reason,
                           items=fingerprint(texts, config, keep_text))

    return _record(index, build)


def lift(index: db.Index, request_id: str, reason: str, *, by: str | None = None
         ) -> TakedownAct:
    """Record that the takedown ``request_id`` no longer applies (it stays in the log)."""
    _check_words(request_id, reason)

    def build(acts: list[TakedownAct], config: NearDedupConfig) -> TakedownAct:
        if not any(a.request_id == request_id and a.action == "add" for a in acts):
            raise NearDedupError(f"takedown: index {index.label} has no takedown "
                                 f"{request_id}")
        if any(a.request_id == request_id and a.action == "lift" for a in acts):
            raise NearDedupError(f"takedown: {request_id} was lifted already")
        return TakedownAct(seq=len(acts) + 1, action="lift", request_id=request_id,
                           at=utc_now(), by=by or default_by(), reason=reason, items=[])

    return _record(index, build)


def _check_words(request_id: str, reason: str) -> None:
    if not request_id.strip() or request_id != request_id.strip() or "\n" in request_id:
        raise NearDedupError(f"usage: takedown --request {request_id!r}: a request id is one "
                             f"word or phrase without surrounding spaces")
    if not reason.strip():
        raise NearDedupError("usage: takedown --reason must say why")


# ---------------------------------------------------------------------- what is shown


def summary(act: TakedownAct, label: str) -> str:
    if act.action == "lift":
        return f"takedown {act.request_id} lifted in index {label} (act {act.seq})"
    return (f"takedown {act.request_id} recorded in index {label} (act {act.seq}, "
            f"{count(len(act.items), 'text')})")


def list_lines(acts: Sequence[TakedownAct]) -> list[str]:
    """One line per request: id, state, texts, when and by whom, why."""
    lifted = {a.request_id: a for a in acts if a.action == "lift"}
    lines = []
    for a in acts:
        if a.action != "add":
            continue
        state = f"lifted {lifted[a.request_id].at}" if a.request_id in lifted else "in force"
        lines.append(f"{a.request_id}\t{state}\t{count(len(a.items), 'text')}\t{a.at}\t"
                     f"{a.by}\t{a.reason}")
    return lines


def show(acts: Sequence[TakedownAct], request_id: str, label: str) -> dict:
    """Everything recorded about one request: its add (items without their fingerprints'
    bytes) and its lift, if any."""
    mine = [a for a in acts if a.request_id == request_id]
    if not mine:
        raise NearDedupError(f"takedown: index {label} has no takedown {request_id}")
    add_act = next(a for a in mine if a.action == "add")
    lift_act = next((a for a in mine if a.action == "lift"), None)
    return {
        "request_id": request_id,
        "state": "lifted" if lift_act is not None else "in force",
        "recorded": {"act": add_act.seq, "at": add_act.at, "by": add_act.by,
                     "reason": add_act.reason},
        "lifted": None if lift_act is None else {"act": lift_act.seq, "at": lift_act.at,
                                                  "by": lift_act.by,
                                                  "reason": lift_act.reason},
        "texts": [{"id": i.id, "text_sha256": i.text_sha256, "chars": i.chars,
                   "near_copies": i.signature is not None,
                   **({"text": i.text} if i.text is not None else {})}
                  for i in add_act.items],
    }


def show_text(shown: dict) -> str:
    r = shown["recorded"]
    lines = [f"takedown {shown['request_id']}: {shown['state']}",
             f"  recorded {r['at']} by {r['by']} (act {r['act']}): {r['reason']}"]
    if shown["lifted"] is not None:
        f = shown["lifted"]
        lines.append(f"  lifted {f['at']} by {f['by']} (act {f['act']}): {f['reason']}")
    for t in shown["texts"]:
        how = "and near copies" if t["near_copies"] else "exact copies only (under min_chars)"
        lines.append(f"  {t['id']}: {t['chars']:,} characters, sha256 {t['text_sha256'][:16]}… "
                     f"({how}){'; text kept' if 'text' in t else ''}")
    return "\n".join(lines)
