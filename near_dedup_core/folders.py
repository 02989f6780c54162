"""What a folder given to the wrong command is, said in one line with the command to use.

A command that refuses a folder names what is wrong in terms of its own format (``report X:
decisions.jsonl is not listed in checksums.sha256``); when the folder is in fact another
frozen kind (a mixture given to ``report verify``, a package given to ``report html``) or a
release day's folder holding packages (given to ``snapshot validate``), `misplaced` says
that instead. A folder counts as a kind only when its manifest's ``format`` and the file
that only that kind holds agree, so that a damaged report is still reported as damaged.
"""

from __future__ import annotations

from pathlib import Path

import orjson

#: Each frozen kind: its manifest's ``format``, the file or folder only it holds, how
#: messages name it and the command that checks it.
KINDS = {
    "package": ("training-snapshot", "data", "a snapshot package", "snapshot validate"),
    "report": ("near-dedup-report", "decisions.jsonl", "a near-dedup report", "report verify"),
    "contamination": ("near-dedup-contamination", "contamination.jsonl",
                      "a contamination report", "report verify"),
    "mixture": ("mixture-package", "plan.json", "a mixture package", "mixture verify"),
}

#: Folders of a day folder listed in a message at most.
_LISTED = 5


def folder_kind(folder: Path) -> str | None:
    """The key of `KINDS` that ``folder`` is, or None (not a folder of ours, or unreadable)."""
    try:
        manifest = orjson.loads((folder / "manifest.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    if not isinstance(manifest, dict):
        return None
    for kind, (fmt, marker, _, _) in KINDS.items():
        if manifest.get("format") == fmt and (folder / marker).exists():
            return kind
    return None


def packages_inside(folder: Path) -> list[Path]:
    """The snapshot packages directly inside ``folder`` (a release day's folder), sorted."""
    try:
        children = sorted(p for p in folder.iterdir() if p.is_dir())
    except OSError:
        return []
    return [child for child in children if folder_kind(child) == "package"]


def misplaced(folder: Path, wanted: tuple[str, ...], what: str, shown: str) -> str | None:
    """The one line for ``folder`` (shown as ``shown``) given where one of ``wanted`` (keys
    of `KINDS`) belongs, when it is another kind or a folder of packages; None when it is
    none of those (the command's own message stands). ``what`` names the argument as the
    command's messages do (``report``, ``mixture``, ``package``)."""
    kind = folder_kind(folder)
    if kind is not None and kind not in wanted:
        _, _, name, command = KINDS[kind]
        expected = " or ".join(KINDS[k][2] for k in wanted)
        return (f"{what} {shown}: this folder is {name}, not {expected}; check it with "
                f"`near-dedup {command} {shown}`")
    if kind is None and "package" in wanted and not (folder / "manifest.json").exists():
        inside = packages_inside(folder)
        if inside:
            names = [p.name for p in inside[:_LISTED]]
            more = f" and {len(inside) - _LISTED} more" if len(inside) > _LISTED else ""
            listing = " ".join(f"{shown.rstrip('/')}/{n}" for n in names)
            return (f"{what} {shown}: a folder holding snapshot packages ({', '.join(names)}"
                    f"{more}), not a package itself; pass the package folders themselves: "
                    f"{listing}{' …' if more else ''}")
    return None
