"""Shared test helpers: write snapshot packages from record lists, run the CLI in-process,
assert a refusal in one line, real prose (stdlib docstring paragraphs) and the word edits
that make near duplicates of it, what an index holds on any backend, a scan paused while an
append runs, and an ``index`` killed inside its fold of ``bands_recent``.

Import them in a test module with ``from helpers import make_package, run_cli``; test modules
import nothing from each other or from pytest's conftest.
"""

from __future__ import annotations

import ast
import contextlib
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from near_dedup_core import cli
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.guard import SYMBOL_UNITS
from near_dedup_core.normalize import normalize
from near_dedup_core.signature import MinHasher, exact_jaccard

if TYPE_CHECKING:
    import dagster as dg

    from near_dedup_assets.resources import ReleaseSettings

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


def refused(argv: Sequence[object], *fragments: str, code: int = 1) -> str:
    """Run ``near-dedup argv...`` in-process and assert a refusal: exit ``code`` (1 for bad
    input, 2 for a limit), nothing on stdout, exactly one stderr line, ``near-dedup: error: …``,
    no traceback, holding every fragment. Returns that line without its newline."""
    got, out, err = run_cli(*argv)
    assert got == code, (got, out, err)
    assert out == "", (out, err)
    assert err.startswith("near-dedup: error: ") and err.endswith("\n") \
        and err.count("\n") == 1, err
    assert "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    return err[:-1]


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


# --------------------------------------------------------------------------- scans of real prose

DEFAULTS = NearDedupConfig()
THRESHOLD = DEFAULTS.threshold
HASHER = MinHasher(1, DEFAULTS.seed, DEFAULTS.shingle_size)


@lru_cache(maxsize=1)
def stdlib_docstrings() -> tuple[str, ...]:
    """Docstrings over 500 characters of the interpreter's top-level stdlib modules (module,
    class and function docstrings, in file then source order), each normalized text once."""
    root = Path(sysconfig.get_paths()["stdlib"])
    seen: set[str] = set()
    docs = []
    for path in sorted(root.glob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) > 500 and normalize(doc) not in seen:
                    seen.add(normalize(doc))
                    docs.append(doc)
    return tuple(docs)


@lru_cache(maxsize=1)
def plain_prose() -> tuple[str, ...]:
    """Docstrings of 600–1600 characters with no digits and no unit symbols, each far from
    the others (J < 0.5; the stdlib repeats some docstrings nearly verbatim): the numeric/unit
    guard sees nothing in them, so the edits of a test alone decide what is similar and what
    the guard sees."""
    docs: list[str] = []
    sets: list = []
    for doc in stdlib_docstrings():
        if (600 <= len(doc) <= 1600 and not re.search(r"\d", doc)
                and not any(unit in doc for unit in SYMBOL_UNITS)):
            shingles = HASHER.shingle_set(normalize(doc))
            if all(exact_jaccard(shingles, other) < 0.5 for other in sets):
                docs.append(doc)
                sets.append(shingles)
    assert len(docs) >= 40, "the stdlib should offer enough plain prose"
    return tuple(docs)


def jaccard(a: str, b: str) -> float:
    """Exact Jaccard of the hashed shingle sets of two texts, as scan computes it."""
    sa, sb = HASHER.shingle_sets([normalize(a), normalize(b)])
    return exact_jaccard(sa, sb)


def replace_words(text: str, start: int, donor: str, count: int) -> str:
    """``text`` with ``count`` words from ``start`` (negative: from the end) replaced by the
    first words of ``donor``: a reprint whose opening or closing was rewritten."""
    words, new = text.split(), donor.split()[:count]
    if start < 0:
        start = len(words) + start
    return " ".join(words[:start] + new + words[start + count:])


def near_copy(text: str, donor: str) -> str:
    """A reprint with two words in the middle replaced: J well above the threshold."""
    copy = replace_words(text, len(text.split()) // 2, donor, 2)
    assert THRESHOLD <= jaccard(text, copy) < 1.0
    return copy




def cli_ok(*argv: object) -> str:
    code, out, err = run_cli("--quiet", *argv)
    assert code == 0, err
    return out


def index(idx: str | Path, *packages: Path, config: Path | None = None,
          workers: int = 1) -> str:
    cfg = ("--config", config) if config else ()
    return cli_ok("--index", idx, *cfg, "index", "--inputs", *packages, "--workers", workers)


def read_jsonl(path: Path) -> list[dict]:
    # lines end at "\n" only (str.splitlines would also split at U+2028 inside a string)
    return [json.loads(line) for line in path.read_bytes().split(b"\n") if line]


@dataclass
class Report:
    path: Path
    manifest: dict
    decisions: list[dict]
    relations: list[dict]
    origins: list[dict]

    def decision(self, package_id: str, sample_id: str) -> dict:
        found = [d for d in self.decisions
                 if (d["package_id"], d["sample_id"]) == (package_id, sample_id)]
        assert len(found) == 1, (package_id, sample_id)
        return found[0]

    def outcome(self, package_id: str, sample_id: str) -> tuple:
        """(decision, reason, kept as "package/sample" or None)."""
        d = self.decision(package_id, sample_id)
        kept = f"{d['kept']['package_id']}/{d['kept']['sample_id']}" if d["kept"] else None
        return d["decision"], d["reason"], kept

    def pairs(self) -> set[tuple]:
        """Relations as (sample "pkg/id", match "pkg/id" or content_id, kind, history_only,
        blocked_by)."""
        out = set()
        for r in self.relations:
            m = r["match"]
            match = (f"{m['package_id']}/{m['sample_id']}" if m["package_id"] is not None
                     else m["content_id"])
            out.add((f"{r['sample']['package_id']}/{r['sample']['sample_id']}", match,
                     r["kind"], r["history_only"], r["blocked_by"]))
        return out

    def involving(self, package_id: str, sample_id: str) -> list[dict]:
        ref = {"package_id": package_id, "sample_id": sample_id}
        return [r for r in self.relations
                if r["sample"] == ref or {k: r["match"][k] for k in ref} == ref]


def load_report(path: Path) -> Report:
    return Report(path, json.loads((path / "manifest.json").read_text(encoding="utf-8")),
                  read_jsonl(path / "decisions.jsonl"), read_jsonl(path / "relations.jsonl"),
                  read_jsonl(path / "origins.jsonl"))


def scan(idx: str | Path, packages: list[Path], out: Path, *, config: Path | None = None,
         workers: int = 1) -> Report:
    cfg = ("--config", config) if config else ()
    cli_ok("--index", idx, *cfg, "scan", "--inputs", *packages, "--output", out,
           "--workers", workers)
    return load_report(out)


def cpt(sample_id: str, text: str, domain: str = "docs", **extra) -> dict:
    return {"id": sample_id, "text": text, "domain": domain,
            "source": {"dataset": "stdlib-docs", "row": sample_id}, **extra}


# --------------------------------------------------------------------------- Dagster release runs


def template(path: Path, **overrides) -> Path:
    """A mixture template for the release's tests, written to ``path``."""
    data = {"kind": "cpt", "target_records": 8, "group_by": "domain",
            "strategy": {"type": "temperature", "temperature": 2.0},
            "quality": {"min_chars": 0}, "allow_shortfall": False, "redistribute": True,
            "seed": 7, **overrides}
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def settings_for(out: Path, snapshots: Path, **overrides) -> ReleaseSettings:
    """The release settings of a test: its folders under ``out``, the shipped config, one
    worker; ``overrides`` replace any field."""
    from near_dedup_assets.resources import ReleaseSettings

    out.mkdir(parents=True, exist_ok=True)
    values = dict(snapshot_root=str(snapshots), index=str(out / "index" / "cpt-near.sqlite"),
                  config=str(REPO / "config" / "near-dedup.json"),
                  report_root=str(out / "reports"), mixture_root=str(out / "mixtures"),
                  release_root=str(out / "releases"),
                  mixture_template=str(template(out / "mixture-template.json")),
                  workers=1)
    values.update(overrides)
    return ReleaseSettings(**values)


def metadata(result, key: dg.AssetKey) -> dict:
    """The metadata of the run's one materialization of ``key``."""
    [event] = [e for e in result.get_asset_materialization_events()
               if e.asset_key == key]
    return {k: v.value for k, v in event.materialization.metadata.items()}


def executed_steps(result) -> set[str]:
    import dagster as dg

    return {e.step_key for e in result.all_events
            if e.event_type == dg.DagsterEventType.STEP_START}


def check_results(result) -> dict[str, dg.AssetCheckEvaluation]:
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


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


# --------------------------------------------------------------------------- any backend


def index_state(location: str | Path) -> dict:
    """What a reader sees of the index at ``location``, on any backend: `index check`'s counts
    (which checks every invariant first), the meta rows but ``created_at``, the packages."""
    from near_dedup_core.index_store import open_index

    index = open_index(location)
    with index.errors():
        checked = index.check()
        with index.snapshot() as snap:
            meta = {k: v for k, v in snap.meta().items() if k != "created_at"}
            packages = [tuple(p)[1:] for p in snap.indexed_packages()]
    return {"counts": checked[1:5], "meta": meta, "packages": packages}


def index_bytes(location: str | Path) -> object:
    """Everything stored of the index at ``location``, to assert that a command changed
    nothing: the SQLite file's bytes, every file of an Iceberg folder (its catalog, tables and
    locks), a digest of every PostgreSQL table's rows; None where no index exists."""
    from near_dedup_core.index_store import open_index

    index = open_index(location)
    if index.file is not None:
        return index.file.read_bytes() if index.file.exists() else None
    if str(location).startswith("iceberg://"):
        folder = index.folder  # type: ignore[union-attr]
        return tree_bytes(folder) if folder.exists() else None
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    engine = create_engine("postgresql+psycopg://" + str(location).split("://", 1)[1],
                           poolclass=NullPool)
    with engine.connect() as conn:
        tables = conn.execute(text("SELECT tablename FROM pg_tables "
                                   "WHERE schemaname = 'public' ORDER BY 1")).scalars().all()
        return {t: conn.execute(text(f"SELECT md5(string_agg(r::text, ',' ORDER BY r::text)) "
                                     f"FROM {t} r")).scalar_one() for t in tables} or None


def scan_with_an_append_meanwhile(python: list[str], argv: list[str], stage: str, flag: Path,
                                  append: Callable[[], str]) -> str:
    """Run ``python … --quiet argv`` (a scan) in a process of its own, paused at ``stage``
    (`progress.pause_point`) while ``append()`` runs; the scan must then succeed. Returns
    what ``append`` returned."""
    proc = subprocess.Popen(
        [sys.executable, *python, "--quiet", *argv],
        env={**os.environ, "PYTHONPATH": str(REPO), "NEAR_DEDUP_PAUSE": f"{stage}:{flag}"},
        stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not flag.exists():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the scan never paused"
            time.sleep(0.05)
        appended = append()
    finally:
        flag.unlink(missing_ok=True)
        _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return appended


def run_doc_block(doc: str, heading: str, folder: Path,
                  env: dict[str, str] | None = None
                  ) -> tuple[subprocess.CompletedProcess, str]:
    """The first ``sh`` block under ``heading`` of ``docs/<doc>``, verbatim in bash (``-euo
    pipefail``) in ``folder`` holding a copy of the samples, with this venv's ``near-dedup``
    first on PATH; it must exit 0. The run and the block's text."""
    text = (REPO / "docs" / doc).read_text(encoding="utf-8")
    section = text[text.index(f"\n{heading}\n"):]
    block = re.search(r"^```sh\n(.*?)^```", section, re.DOTALL | re.MULTILINE)
    assert block is not None, f"no sh block under {heading}"
    shutil.copytree(REPO / "samples", folder / "samples")
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    run = subprocess.run(["bash", "-euo", "pipefail", "-c", block.group(1)], cwd=folder,
                         env={**os.environ, **(env or {}), "PATH": path}, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    return run, block.group(1)
