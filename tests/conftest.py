"""Shared test helpers: write snapshot packages from record lists, run the CLI in-process,
real prose (stdlib docstring paragraphs) and the word edits that make near duplicates of it,
and an ``index`` killed inside its fold of ``bands_recent``.

Import them in a test module with ``from conftest import make_package, run_cli``.
"""

from __future__ import annotations

import ast
import contextlib
import gzip
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

import orjson

from near_dedup_core import cli

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "samples"


def make_package(tmp_path: Path, package_id: str, splits: dict[str, list], *,
                 kind: str = "cpt", tokenizer: str | None = "qwen2-tok@r3",
                 depends_on: tuple[str, ...] | list[str] = (),
                 parents: tuple[str, ...] | list[str] = (),
                 created_at: str = "2026-11-25T00:00:00Z", shard_records: int | None = None,
                 gz: bool = False, dirname: str | None = None) -> Path:
    """Write a package folder ``tmp_path/<dirname or package_id>`` and return its path.

    ``splits`` maps a split name to its records, in order. A record is a dict (one JSON
    line) or bytes (written verbatim as one line, for malformed input). ``shard_records``
    cuts each split into shards of at most that many lines; ``gz`` writes ``.jsonl.gz``
    shards. The manifest lists every shard with its true size, sha256 and line count, so
    the package is valid unless its records are not. ``tokenizer`` "NAME@REVISION" is
    written for cpt packages only.
    """
    root = tmp_path / (dirname or package_id)
    files = []
    for split, records in splits.items():
        size = shard_records or max(len(records), 1)
        for shard, start in enumerate(range(0, max(len(records), 1), size)):
            lines = [r if isinstance(r, bytes) else orjson.dumps(r)
                     for r in records[start:start + size]]
            payload = b"".join(line if line.endswith(b"\n") else line + b"\n" for line in lines)
            rel = f"data/{split}/part-{shard:05d}.jsonl" + (".gz" if gz else "")
            if gz:
                payload = gzip.compress(payload, mtime=0)
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(payload)
            files.append({"path": rel, "split": split, "records": len(lines),
                          "bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()})
    manifest: dict = {"format": "training-snapshot", "format_version": 2,
                      "package_id": package_id, "kind": kind, "created_at": created_at}
    if kind == "cpt" and tokenizer is not None:
        name, _, revision = tokenizer.rpartition("@")
        manifest["tokenizer"] = {"name": name, "revision": revision}
    manifest["lineage"] = {"parents": list(parents), "depends_on": list(depends_on)}
    manifest["files"] = files
    root.mkdir(parents=True, exist_ok=True)
    (root / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return root


def update_manifest(package: Path, change: Callable[[dict], None]) -> None:
    """Load ``package``'s manifest.json, let ``change`` edit the dict in place, write it back."""
    path = package / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    change(manifest)
    path.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")


def run_cli(*argv: object) -> tuple[int, str, str]:
    """Run ``near-dedup argv...`` in-process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([str(arg) for arg in argv])
    return code, out.getvalue(), err.getvalue()


def tree_bytes(folder: Path) -> dict[str, bytes]:
    """Every file below ``folder`` by relative path, to assert that nothing changed."""
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------- real prose


@lru_cache(maxsize=1)
def stdlib_paragraphs(min_chars: int = 300) -> tuple[str, ...]:
    """Distinct paragraphs (whitespace collapsed) of at least ``min_chars`` characters from the
    module, class and function docstrings of the top-level stdlib modules, in file order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    seen: dict[str, None] = {}
    for path in sorted(root.glob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        nodes = [tree, *(n for n in tree.body
                         if isinstance(n, (ast.FunctionDef, ast.ClassDef)))]
        for node in nodes:
            for para in (ast.get_docstring(node) or "").split("\n\n"):
                para = " ".join(para.split())
                if len(para) >= min_chars:
                    seen.setdefault(para)
    paragraphs = tuple(seen)
    assert len(paragraphs) >= 200, "the stdlib should give a few hundred long paragraphs"
    return paragraphs


def reverse_every(text: str, every: int) -> str:
    """Reverse every ``every``-th word if it is alphabetic and longer than two letters (one
    edited word each; numbers are left alone so the numeric guard is not involved)."""
    words = text.split(" ")
    return " ".join(w[::-1] if i % every == every - 1 and len(w) > 2 and w.isalpha() else w
                    for i, w in enumerate(words))


def drop_every(text: str, every: int) -> str:
    """Delete every ``every``-th word if it is alphabetic."""
    return " ".join(w for i, w in enumerate(text.split(" "))
                    if i % every != every - 1 or not w.isalpha())


# --------------------------------------------------------------------------- kills


_PAUSE_IN_FOLD = """
import sys, time
from near_dedup_core import cli
from near_dedup_core.index_store.batch import BatchTransaction
fold = BatchTransaction.fold_recent_bands
def fold_then_pause(self):
    moved = fold(self)
    print("paused in the fold", file=sys.stderr, flush=True)
    time.sleep(600)
    return moved
BatchTransaction.fold_recent_bands = fold_then_pause
sys.exit(cli.main(sys.argv[1:]))
"""


def sigkill_in_the_fold(index: str | Path, pkg: Path) -> None:
    """``index`` of ``pkg`` in a process of its own, SIGKILLed after the fold's statements
    ran, before its transaction commits."""
    proc = subprocess.Popen([sys.executable, "-c", _PAUSE_IN_FOLD, "--quiet", "--index",
                             str(index), "index", "--inputs", str(pkg)],
                            env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = proc.stderr.readline() if proc.stderr else b""
        assert b"paused in the fold" in line, (line, proc.poll())
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
