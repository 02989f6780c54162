"""What is compared: isolation scope, compared text, content_id and text_sha256 of a record.

- CPT: scope = tokenizer identity (name + revision); compared text = ``text``.
- SFT: scope = (task, normalized system, normalized material text, sorted image sha256s);
  compared text = the QA text of ``messages``, one ``role: content`` line per message.
  Images are compared by hash only.

``content_id`` = the first 16 bytes of sha256(scope key, NUL, normalized compared text): the
same content has the same id whatever package it came from. ``text_sha256`` = sha256 of the
compared text before normalization.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from near_dedup_core.normalize import normalize


@dataclass(frozen=True)
class Scope:
    """An isolation scope: ``key`` is canonical JSON (stored once in the index), ``label`` the
    short form written into reports."""

    key: str
    label: str


def qa_text(messages: list[dict]) -> str:
    """The SFT compared text before normalization: ``role: content`` lines."""
    return "\n".join(f"{m['role']}: {m['content']}" for m in messages)


def compared_text(kind: str, data: dict) -> str:
    return data["text"] if kind == "cpt" else qa_text(data["messages"])


def cpt_scope(tokenizer: dict) -> Scope:
    key = json.dumps(["cpt", tokenizer["name"], tokenizer["revision"]], ensure_ascii=False)
    return Scope(key, f"tokenizer:{tokenizer['name']}@{tokenizer['revision']}")


def sft_scope(data: dict) -> Scope:
    material = data.get("material") or {}
    images = sorted(img["sha256"] for img in material.get("images") or [])
    key = json.dumps(["sft", data["task"], normalize(data.get("system") or ""),
                      normalize(material.get("text") or ""), images], ensure_ascii=False)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return Scope(key, f"sft:{data['task']}:{digest}")


def content_id(scope_key: str, normalized: str) -> bytes:
    """The first 16 bytes of sha256(scope key, NUL, normalized text), both in UTF-8."""
    return content_id_in(scope_hash(scope_key), normalized.encode())


def scope_hash(scope_key: str) -> hashlib._Hash:
    """The sha256 state after a scope's key and the NUL: what `content_id_in` starts from
    for each text of the scope."""
    h = hashlib.sha256(scope_key.encode())
    h.update(b"\0")
    return h


def content_id_in(scope: hashlib._Hash, utf8: bytes) -> bytes:
    """`content_id` of a normalized text given as UTF-8, in the scope of `scope_hash`."""
    h = scope.copy()
    h.update(utf8)
    return h.digest()[:16]


def text_sha256(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()
