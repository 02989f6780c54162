"""Which names the storage layer accepts: a location given on the command line holds no
control character, and a key listed below a prefix on object storage is a plain relative
path (it becomes a file's path inside a fetched folder, so it must not point anywhere
else). Both are checked before anything is read or written; a refusal shows the name with
its control characters escaped, so the error stays one line."""

from __future__ import annotations

import re

from near_dedup_core.errors import NearDedupError

#: C0 and C1 control characters and DEL: never part of a name the product accepts.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def shown(name: str) -> str:
    """``name`` with each control character written as ``\\xNN`` (one printable line)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", name)


def check_location_text(text: str) -> None:
    """Refuse a location (path or URL) that holds a control character."""
    found = _CONTROL.search(text)
    if found is not None:
        raise NearDedupError(f"{shown(text)}: a location may not hold control characters "
                             f"(\\x{ord(found.group()):02x} here); nothing was read or "
                             f"written")


def key_problem(rel: str) -> str | None:
    """Why ``rel``, a key below a prefix, is not a plain relative path (None if it is):
    empty, absolute, an empty, ``.`` or ``..`` segment, a backslash or a control
    character."""
    if not rel:
        return "an empty path"
    if _CONTROL.search(rel):
        return "a control character"
    if "\\" in rel:
        return "a backslash"
    if rel.startswith("/"):
        return "an absolute path"
    segments = rel.split("/")
    if "" in segments:
        return "an empty segment (//)"
    if ".." in segments:
        return "a '..' segment"
    if "." in segments:
        return "a '.' segment"
    return None


def check_key(url: str, rel: str) -> None:
    """Refuse the object ``rel`` below the prefix ``url`` unless its key is a plain relative
    path."""
    problem = key_problem(rel)
    if problem is not None:
        raise NearDedupError(f"{url}: the object {shown(url + '/' + rel)} is refused: its key "
                             f"is not a plain relative path below the prefix ({problem}); "
                             f"nothing was written")
