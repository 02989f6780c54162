"""A reusable tamper suite for frozen folders (near-dedup reports and mixture packages).

A `Case` edits a copy of a frozen folder the way an attacker or a careless hand would; the
verifier must then refuse the folder with exit code 1 and one stderr line. Cases come in
families, generated per file of the folder:

- **byte** — one byte flipped in a file (checksums left stale);
- **line** — a JSONL line deleted, duplicated, or two lines swapped, with the checksums
  left stale and again *resealed* (`reseal`: every ``checksums.sha256`` regenerated and, in a
  mixture, the data files' sha256 and the embedded report's manifest_sha256 recorded anew);
- **listing** — ``checksums.sha256`` not in canonical form: CRLF, no final newline, lines
  reordered or duplicated, an extra ``<sha>  ../evil.txt`` or absolute-path line (the file it
  names exists outside with that very sha256), uppercase hex, ``./`` paths;
- **tree** — a file replaced by a symlink to an identical copy outside the folder, a
  directory replaced by a symlink, an added empty directory, an added file (stale and
  resealed), a FIFO;
- **semantic** — edits the checksums cannot see (always resealed) that the folder's own
  cross-references contradict: listed per verifier in `report_cases` and `mixture_cases`.

Case functions take ``(folder, outside)``: ``outside`` is a scratch directory next to, not
inside, the folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson

from near_dedup_core.fsutil import CHECKSUMS, json_line, write_checksums, write_json
from near_dedup_core.report import count_decisions

Edit = Callable[[Path, Path], None]


@dataclass(frozen=True)
class Case:
    family: str
    name: str
    edit: Edit

    @property
    def id(self) -> str:
        return f"{self.family}:{self.name}"


# --------------------------------------------------------------------------- primitives


def rows(folder: Path, rel: str) -> list[dict]:
    return [orjson.loads(line) for line in (folder / rel).read_bytes().splitlines()]


def write_rows(folder: Path, rel: str, data: list[dict]) -> None:
    (folder / rel).write_bytes(b"".join(json_line(r) for r in data))


def edit_json(folder: Path, rel: str, change: Callable[[dict], None]) -> None:
    obj = json.loads((folder / rel).read_text(encoding="utf-8"))
    change(obj)
    write_json(folder / rel, obj)


def edit_rows(folder: Path, rel: str, change: Callable[[list[dict]], None]) -> None:
    data = rows(folder, rel)
    change(data)
    write_rows(folder, rel, data)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def reseal(folder: Path) -> None:
    """Make ``folder`` pass its checksums again after an edit, as an attacker would: the
    embedded report's ``checksums.sha256`` first, then (mixtures) the data files' sha256 and
    the embedded report's manifest sha256 in manifest.json, then the folder's own listing."""
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    if manifest.get("format") == "mixture-package":
        embedded = folder / "near-dedup"
        if (embedded / CHECKSUMS).is_file():
            write_checksums(embedded)
        for f in manifest.get("files") or []:
            if isinstance(f, dict) and (folder / str(f.get("path"))).is_file():
                f["sha256"] = _sha(folder / f["path"])
        if isinstance(manifest.get("near_dedup_report"), dict) \
                and (embedded / "manifest.json").is_file():
            manifest["near_dedup_report"]["manifest_sha256"] = _sha(embedded / "manifest.json")
        write_json(folder / "manifest.json", manifest)
    write_checksums(folder)


def resealed(edit: Edit) -> Edit:
    def run(folder: Path, outside: Path) -> None:
        edit(folder, outside)
        reseal(folder)
    return run


def recount_report(folder: Path) -> None:
    """Recompute a report manifest's counts and line counts from its files (a careful
    attacker's edit), keeping the candidate counts."""
    decisions, relations = rows(folder, "decisions.jsonl"), rows(folder, "relations.jsonl")

    def change(m: dict) -> None:
        m["counts"] = count_decisions(decisions, relations) | {
            "candidates": m["counts"]["candidates"]}
        for name in ("decisions.jsonl", "relations.jsonl", "origins.jsonl"):
            m["files"][name]["lines"] = len((folder / name).read_bytes().splitlines())
    edit_json(folder, "manifest.json", change)


# --------------------------------------------------------------------------- generic families


def files_of(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def byte_cases(files: list[str]) -> list[Case]:
    def flip(rel: str) -> Edit:
        def run(folder: Path, outside: Path) -> None:
            data = bytearray((folder / rel).read_bytes())
            data[len(data) // 2] ^= 0x01
            (folder / rel).write_bytes(bytes(data))
        return run
    return [Case("byte", f"flip {rel}", flip(rel)) for rel in files]


def _line_ops() -> dict[str, Callable[[list[bytes]], list[bytes]]]:
    def delete(lines):
        return lines[:len(lines) // 2] + lines[len(lines) // 2 + 1:]

    def duplicate(lines):
        k = len(lines) // 2
        return lines[:k + 1] + [lines[k]] + lines[k + 1:]

    def swap(lines):
        k = len(lines) // 2
        out = list(lines)
        j = next(i for i in range(k + 1, len(lines)) if lines[i] != lines[k])
        out[k], out[j] = out[j], out[k]
        return out
    return {"delete": delete, "duplicate": duplicate, "swap": swap}


def line_cases(jsonl: list[str]) -> list[Case]:
    def op_on(rel: str, op) -> Edit:
        def run(folder: Path, outside: Path) -> None:
            path = folder / rel
            path.write_bytes(b"".join(op(path.read_bytes().splitlines(keepends=True))))
        return run
    out = []
    for rel in jsonl:
        for name, op in _line_ops().items():
            out.append(Case("line", f"{name} a line of {rel}", op_on(rel, op)))
            out.append(Case("line", f"{name} a line of {rel}, resealed",
                            resealed(op_on(rel, op))))
    return out


def listing_cases(prefix: str = "") -> list[Case]:
    """``checksums.sha256`` edits; with ``prefix`` (an embedded folder) the outer listing is
    resealed so only the embedded verifier can see the edit."""
    sums = prefix + CHECKSUMS

    def text_edit(change: Callable[[list[str]], list[str]]) -> Edit:
        def run(folder: Path, outside: Path) -> None:
            lines = (folder / sums).read_text(encoding="utf-8").split("\n")[:-1]
            (folder / sums).write_bytes("".join(change(lines)).encode())
            if prefix:
                write_checksums(folder)
        return run

    def nl(lines):
        return [line + "\n" for line in lines]

    def evil(target: str) -> Edit:
        def run(folder: Path, outside: Path) -> None:
            bait = outside / "evil.txt"
            bait.write_text("outside the folder\n", encoding="utf-8")
            path = "../evil.txt" if target == "dotdot" else str(bait)
            with open(folder / sums, "a", encoding="utf-8") as fh:
                fh.write(f"{_sha(bait)}  {path}\n")
            if prefix:
                write_checksums(folder)
        return run

    def dot(lines):
        d, _, rel = lines[0].partition("  ")
        return nl([f"{d}  ./{rel}", *lines[1:]])

    return [
        Case("listing", f"{sums} CRLF", text_edit(lambda ls: [x + "\r\n" for x in ls])),
        Case("listing", f"{sums} no final newline",
             text_edit(lambda ls: ["\n".join(ls)])),
        Case("listing", f"{sums} reordered", text_edit(lambda ls: nl(ls[::-1]))),
        Case("listing", f"{sums} line duplicated", text_edit(lambda ls: nl(ls + ls[-1:]))),
        Case("listing", f"{sums} blank line", text_edit(lambda ls: nl(ls) + ["\n"])),
        Case("listing", f"{sums} uppercase hex",
             text_edit(lambda ls: nl([ls[0][:64].upper() + ls[0][64:], *ls[1:]]))),
        Case("listing", f"{sums} ./ path", text_edit(dot)),
        Case("listing", f"{sums} extra ../evil.txt", evil("dotdot")),
        Case("listing", f"{sums} extra absolute path", evil("absolute")),
    ]


def tree_cases(files: list[str], dirs: list[str]) -> list[Case]:
    def symlink_file(rel: str) -> Edit:
        def run(folder: Path, outside: Path) -> None:
            copy = outside / rel.replace("/", "__")
            shutil.copyfile(folder / rel, copy)
            (folder / rel).unlink()
            os.symlink(copy, folder / rel)
        return run

    def symlink_dir(rel: str) -> Edit:
        def run(folder: Path, outside: Path) -> None:
            copy = outside / rel.replace("/", "__")
            shutil.copytree(folder / rel, copy)
            shutil.rmtree(folder / rel)
            os.symlink(copy, folder / rel, target_is_directory=True)
        return run

    def mkdir(rel: str) -> Edit:
        return lambda folder, outside: (folder / rel).mkdir(parents=True)

    def add_file(rel: str) -> Edit:
        return lambda folder, outside: (folder / rel).write_text("added\n", encoding="utf-8")

    def fifo(folder: Path, outside: Path) -> None:
        os.mkfifo(folder / "pipe")

    out = [Case("tree", f"symlink {rel} to an identical copy outside", symlink_file(rel))
           for rel in files]
    out += [Case("tree", f"symlink directory {rel} to an identical copy outside",
                 symlink_dir(rel)) for rel in dirs]
    inner = (dirs[0] + "/") if dirs else ""
    out += [
        Case("tree", "empty directory added", mkdir("extra")),
        Case("tree", "empty nested directory added", mkdir(f"{inner}extra/deeper")),
        Case("tree", "file added", add_file("notes.txt")),
        Case("tree", "file added, resealed", resealed(add_file("notes.txt"))),
        Case("tree", "nested file added", add_file(f"{inner}notes.txt")),
        Case("tree", "FIFO added", fifo),
    ]
    return out


# --------------------------------------------------------------------------- report semantics


def _find(data: list[dict], **where) -> dict:
    return next(r for r in data if all(r.get(k) == v for k, v in where.items()))


def _key(row: dict) -> tuple[str, str]:
    return row["package_id"], row["sample_id"]


def _ref(key: tuple[str, str]) -> dict:
    return {"package_id": key[0], "sample_id": key[1]}


def report_semantic_cases(prefix: str = "") -> list[Case]:
    """Edits of a report's content, resealed (for a mixture, ``prefix`` = ``near-dedup/``).
    The report needs a near_duplicate and an exact_duplicate exclusion and a unique sample."""
    dec, rel, org, man = (prefix + n for n in ("decisions.jsonl", "relations.jsonl",
                                               "origins.jsonl", "manifest.json"))

    def on_decisions(change: Callable[[list[dict]], None]) -> Edit:
        return resealed(lambda f, o: edit_rows(f, dec, change))

    def on_relations(change: Callable[[list[dict]], None]) -> Edit:
        return resealed(lambda f, o: edit_rows(f, rel, change))

    def on_manifest(change: Callable[[dict], None]) -> Edit:
        return resealed(lambda f, o: edit_json(f, man, change))

    def near(d: list[dict]) -> dict:
        return _find(d, reason="near_duplicate")

    def retarget(d: list[dict]) -> None:
        x = near(d)
        other = next(r for r in d if r["reason"] == "unique" and r["split"] == x["split"]
                     and _key(r) != tuple(x["kept"].values()))
        x["kept"] = _ref(_key(other))

    def swap_decisions(d: list[dict]) -> None:
        x = near(d)
        k = _find(d, package_id=x["kept"]["package_id"], sample_id=x["kept"]["sample_id"])
        fields = ("decision", "reason", "kept", "jaccard")
        xs, ks = {f: x[f] for f in fields}, {f: k[f] for f in fields}
        x.update(ks)
        k.update(xs | {"kept": _ref(_key(x))})

    def swap_rows(folder: Path, outside: Path) -> None:
        for name in (dec, org):
            edit_rows(folder, name, lambda r: r.__setitem__(slice(0, 2), r[1::-1][:2]))

    def drop_backing_relation(folder: Path, outside: Path) -> None:
        x = near(rows(folder, dec))
        edit_rows(folder, rel, lambda r: r.remove(_find(
            r, sample=_ref(_key(x)), kind="near", blocked_by=None,
            match={"content_id": _find(rows(folder, dec), **x["kept"])["content_id"],
                   **x["kept"]})))
        recount_report(folder / prefix if prefix else folder)

    def flip_to_keep(folder: Path, outside: Path) -> None:
        edit_rows(folder, dec, lambda d: near(d).update(
            decision="keep", reason="unique", kept=None, jaccard=None))
        recount_report(folder / prefix if prefix else folder)

    def relation_jaccard(r: list[dict]) -> None:
        _find(r, kind="near", blocked_by=None, history_only=False)["jaccard"] = 0.999

    def content_of_kept(d: list[dict]) -> None:
        x = near(d)
        _find(d, **x["kept"])["content_id"] = "0" * 32

    return [
        Case("semantic", f"{prefix}config.threshold changed, fingerprint kept",
             on_manifest(lambda m: m["config"].update(threshold=0.85))),
        Case("semantic", f"{prefix}config.rows changed, fingerprint kept",
             on_manifest(lambda m: m["config"].update(rows=7))),
        Case("semantic", f"{prefix}algorithm_version changed",
             on_manifest(lambda m: m.update(algorithm_version="nd-0"))),
        Case("semantic", f"{prefix}config.threshold a string",
             on_manifest(lambda m: m["config"].update(threshold="0.9"))),
        Case("semantic", f"{prefix}config.num_perm a string",
             on_manifest(lambda m: m["config"].update(num_perm="128"))),
        Case("semantic", f"{prefix}config null", on_manifest(lambda m: m.update(config=None))),
        Case("semantic", f"{prefix}inputs [\"x\"]", on_manifest(lambda m: m.update(inputs=["x"]))),
        Case("semantic", f"{prefix}files []", on_manifest(lambda m: m.update(files=[]))),
        Case("semantic", f"{prefix}counts \"x\"", on_manifest(lambda m: m.update(counts="x"))),
        Case("semantic", f"{prefix}format_version \"1\"",
             on_manifest(lambda m: m.update(format_version="1"))),
        Case("semantic", f"{prefix}inputs[0].records a string",
             on_manifest(lambda m: m["inputs"][0].update(records=str(m["inputs"][0]["records"])))),
        Case("semantic", f"{prefix}index.packages emptied",
             on_manifest(lambda m: m["index"].update(packages=[]))),
        Case("semantic", f"{prefix}counts.keep and exclude shifted",
             on_manifest(lambda m: m["counts"].update(keep=m["counts"]["keep"] + 1,
                                                      exclude=m["counts"]["exclude"] - 1))),
        Case("semantic", f"{prefix}exclusion's kept retargeted", on_decisions(retarget)),
        Case("semantic", f"{prefix}two decisions swapped", on_decisions(swap_decisions)),
        Case("semantic", f"{prefix}decision jaccard a string",
             on_decisions(lambda d: near(d).update(jaccard=str(near(d)["jaccard"])))),
        Case("semantic", f"{prefix}exact_duplicate relabelled near_duplicate",
             on_decisions(lambda d: _find(d, reason="exact_duplicate").update(
                 reason="near_duplicate"))),
        Case("semantic", f"{prefix}unique relabelled match_not_kept",
             on_decisions(lambda d: _find(d, reason="unique").update(reason="match_not_kept"))),
        Case("semantic", f"{prefix}kept sample's content_id changed",
             on_decisions(content_of_kept)),
        Case("semantic", f"{prefix}decision with an extra field",
             on_decisions(lambda d: d[0].update(note="ok"))),
        Case("semantic", f"{prefix}relation jaccard a string",
             on_relations(lambda r: r[0].update(jaccard="1.0"))),
        Case("semantic", f"{prefix}relation history_only 0",
             on_relations(lambda r: r[0].update(history_only=0))),
        Case("semantic", f"{prefix}relation jaccard changed", on_relations(relation_jaccard)),
        Case("semantic", f"{prefix}relation names an unknown history source",
             on_relations(lambda r: r[0].update(match_sources=[
                 {"package_id": "ghost", "sample_id": "g", "split": r[0]["match_sources"][0][
                     "split"] if r[0]["match_sources"] else "train"}]))),
        Case("semantic", f"{prefix}origins line number changed",
             resealed(lambda f, o: edit_rows(f, org, lambda r: r[0].update(line=2)))),
        Case("semantic", f"{prefix}decisions and origins lines swapped together",
             resealed(swap_rows)),
        Case("semantic", f"{prefix}backing relation deleted, counts recomputed",
             resealed(drop_backing_relation)),
        Case("semantic", f"{prefix}exclusion flipped to keep, counts recomputed",
             resealed(flip_to_keep)),
    ]


REPORT_FILES = ["checksums.sha256", "decisions.jsonl", "manifest.json", "origins.jsonl",
                "relations.jsonl"]
REPORT_JSONL = ["decisions.jsonl", "relations.jsonl", "origins.jsonl"]


def report_cases() -> list[Case]:
    """Every case for a report folder."""
    return (byte_cases(REPORT_FILES) + line_cases(REPORT_JSONL) + listing_cases()
            + tree_cases(REPORT_FILES, []) + report_semantic_cases())


# --------------------------------------------------------------------------- mixture semantics


def mixture_semantic_cases(data: list[str]) -> list[Case]:
    train = next(rel for rel in data if "/train/" in rel)
    validation = next(rel for rel in data if "/validation/" in rel)

    def edit_text(folder: Path, outside: Path) -> None:
        edit_rows(folder, train, lambda r: r[0].update(text=r[0]["text"] + " edited"))

    def text_only_checksums(folder: Path, outside: Path) -> None:
        edit_text(folder, outside)
        write_checksums(folder)

    def origin_to_excluded(folder: Path, outside: Path) -> None:
        excluded = _find(rows(folder, "near-dedup/decisions.jsonl"), decision="exclude",
                         split="train")
        edit_rows(folder, train, lambda r: r[0].update(origin=_ref(_key(excluded))))

    def on_manifest(change: Callable[[dict], None]) -> Edit:
        return resealed(lambda f, o: edit_json(f, "manifest.json", change))

    def on_plan(change: Callable[[dict], None]) -> Edit:
        return resealed(lambda f, o: edit_json(f, "plan.json", change))

    def drop_retained(folder: Path, outside: Path) -> None:
        edit_rows(folder, validation, lambda r: r.pop())

        def manifest(m: dict) -> None:
            for f in m["files"]:
                if f["path"] == validation:
                    f["records"] -= 1
            m["counts"]["retained"] -= 1
            m["counts"]["by_split"]["validation"] -= 1
        edit_json(folder, "manifest.json", manifest)
        edit_json(folder, "plan.json",
                  lambda p: p["retained_records"].update(
                      validation=p["retained_records"]["validation"] - 1))

    def shift_quota(p: dict) -> None:
        a, b = p["domains"][0], p["domains"][1]
        a["quota"] += 1
        b["quota"] -= 1

    return [
        Case("semantic", "record text edited, checksums.sha256 regenerated",
             text_only_checksums),
        Case("semantic", "record text edited, manifest sha256 and checksums regenerated",
             resealed(edit_text)),
        Case("semantic", "record origin retargeted to an excluded sample",
             resealed(origin_to_excluded)),
        Case("semantic", "record duplicated",
             resealed(lambda f, o: edit_rows(f, train, lambda r: r.insert(1, r[0])))),
        Case("semantic", "records reordered",
             resealed(lambda f, o: edit_rows(f, train, lambda r: r.reverse()))),
        Case("semantic", "retained record dropped, counts and plan updated",
             resealed(drop_retained)),
        Case("semantic", "manifest seed changed", on_manifest(lambda m: m.update(seed=8))),
        Case("semantic", "manifest counts.selected changed",
             on_manifest(lambda m: m["counts"].update(selected=m["counts"]["selected"] + 1))),
        Case("semantic", "manifest target_records a string",
             on_manifest(lambda m: m.update(target_records=str(m["target_records"])))),
        Case("semantic", "manifest allow_shortfall a string",
             on_manifest(lambda m: m.update(allow_shortfall="false"))),
        Case("semantic", "manifest files []", on_manifest(lambda m: m.update(files=[]))),
        Case("semantic", "manifest files[0].records a string",
             on_manifest(lambda m: m["files"][0].update(records=str(m["files"][0]["records"])))),
        Case("semantic", "manifest near_dedup_report.path outside",
             on_manifest(lambda m: m["near_dedup_report"].update(path="../elsewhere"))),
        Case("semantic", "manifest near_dedup_report removed",
             on_manifest(lambda m: m.update(near_dedup_report=None))),
        Case("semantic", "plan weight changed",
             on_plan(lambda p: p["domains"][0].update(weight=p["domains"][0]["weight"] + 0.01))),
        Case("semantic", "plan quota moved between domains", on_plan(shift_quota)),
        Case("semantic", "plan excluded_pool_samples changed",
             on_plan(lambda p: p["near_dedup_report"].update(
                 excluded_pool_samples=p["near_dedup_report"]["excluded_pool_samples"] + 1))),
        Case("semantic", "plan strategy temperature a string",
             on_plan(lambda p: p["strategy"].update(temperature="2.0"))),
        Case("semantic", "plan seed changed", on_plan(lambda p: p.update(seed=8))),
    ]


MIXTURE_DATA = ["data/train/part-00000.jsonl", "data/validation/part-00000.jsonl"]
MIXTURE_FILES = sorted(["checksums.sha256", "manifest.json", "plan.json", *MIXTURE_DATA,
                        *("near-dedup/" + f for f in REPORT_FILES)])


def mixture_cases() -> list[Case]:
    """Every case for a mixture package with an embedded report (``near-dedup/``)."""
    return (byte_cases(MIXTURE_FILES)
            + line_cases(MIXTURE_DATA + ["near-dedup/" + f for f in REPORT_JSONL])
            + listing_cases() + listing_cases("near-dedup/")
            + tree_cases(MIXTURE_FILES, ["data/train", "near-dedup"])
            + mixture_semantic_cases(MIXTURE_DATA)
            + report_semantic_cases("near-dedup/"))
