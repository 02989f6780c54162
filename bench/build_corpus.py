"""Benchmark corpora from real text on this machine, and CPT snapshot packages built from them.

Subcommands (run from the repository root, outputs under the git-ignored bench/corpus and
bench/out):

- ``real``: collect the real documents (raw text, nothing normalized), drop those shorter than
  200 characters or longer than ``max_chars``, drop exact copies, sort deterministically and
  write ``bench/corpus/real.jsonl``.
- ``set20k``: 14,000 real documents + 6,000 reprints of them (``bench/corpus/set20k.jsonl``),
  the set on which recall is measured against exact ground truth.
- ``scale``: a CPT package of N records: the 20k set, then records grown from the real text
  ("mosaics": a window of one real document with windows of one to three others spliced in at
  paragraph boundaries, lengths drawn from the real length distribution, documents weighted
  down inside large template families) and 30 % reprints of them.
- ``next-day``: a package of new content for an incremental day: mosaics from another seed and
  reprints of real documents that the history already holds.

Packages are written with the project's own ``near_dedup_core.package.create_package``.
"""

from __future__ import annotations

import argparse
import bisect
import hashlib
import itertools
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import orjson

from near_dedup_core.fsutil import sha256_file

from bench import reprints
from bench.sources import FAMILIES

CORPUS = Path("bench/corpus")
OUT = Path("bench/out")
REAL = CORPUS / "real.jsonl"
SET20K = CORPUS / "set20k.jsonl"
MIN_CHARS = 200
#: The shipped config's ``max_chars``: a longer sample makes index/scan stop with exit 2.
MAX_CHARS = 200_000
CREATED_AT = "2026-11-29T00:00:00Z"
TOKENIZER = "bench-tok@1"


def read_jsonl(path: Path) -> Iterator[dict]:
    with open(path, "rb") as fh:
        for line in fh:
            yield orjson.loads(line)


def write_jsonl(path: Path, rows) -> int:
    """Write records as canonical JSON lines via a temporary sibling renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    n = 0
    with open(tmp, "wb") as fh:
        for row in rows:
            fh.write(orjson.dumps(row, option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE))
            n += 1
    tmp.replace(path)
    return n


def collect_real(max_chars: int = MAX_CHARS) -> tuple[list[dict], dict]:
    """All real documents, exact copies removed (first in (family, path) order kept)."""
    seen: set[bytes] = set()
    docs: list[dict] = []
    stats: dict = {}
    for domain, collect in FAMILIES.items():
        kept = short = long_ = dup = 0
        for text, source in collect():
            if len(text) < MIN_CHARS:
                short += 1
                continue
            if len(text) > max_chars:
                long_ += 1
                continue
            digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
            if digest in seen:
                dup += 1
                continue
            seen.add(digest)
            kept += 1
            docs.append({"id": f"{domain}-{kept:06d}", "text": text, "domain": domain,
                         "source": source})
        stats[domain] = {"kept": kept, "short": short, "too_long": long_, "exact_copies": dup}
    return docs, stats


def cmd_real(args: argparse.Namespace) -> None:
    t0 = time.monotonic()
    docs, stats = collect_real(args.max_chars)
    n = write_jsonl(args.out, docs)
    chars = [len(d["text"]) for d in docs]
    chars.sort()
    total_bytes = sum(len(d["text"].encode("utf-8", "surrogatepass")) for d in docs)
    print(orjson.dumps({
        "docs": n, "text_bytes": total_bytes, "sha256": sha256_file(args.out), "mean_chars": round(sum(chars) / n),
        "median_chars": chars[n // 2], "by_family": stats,
        "seconds": round(time.monotonic() - t0, 1), "output": str(args.out),
    }, option=orjson.OPT_INDENT_2).decode())


def build_set20k(real: list[dict], n_real: int, n_reprints: int, seed: int) -> list[dict]:
    """``n_real`` real documents (seeded sample, in corpus order) followed by ``n_reprints``
    reprints; a fifth of the reprints copy an earlier reprint (chains of versions)."""
    rng = random.Random(seed)
    if len(real) < n_real:
        raise SystemExit(f"build_corpus: only {len(real)} real documents, need {n_real}")
    chosen = sorted(rng.sample(range(len(real)), n_real))
    base = [real[i] for i in chosen]
    out = [dict(d) for d in base]
    made: list[dict] = []
    for i in range(n_reprints):
        if made and rng.random() < 0.2:
            src = rng.choice(made)
        else:
            src = rng.choice(base)
        donor = rng.choice(real)["text"]
        text, edits = reprints.reprint(src["text"], rng, donor)
        rec = {"id": f"reprint-{i:05d}", "text": text, "domain": src["domain"],
               "source": {"reprint_of": src["id"], "edits": edits}}
        made.append(rec)
    return out + made


def cmd_set20k(args: argparse.Namespace) -> None:
    real = list(read_jsonl(args.real))
    docs = build_set20k(real, args.n_real, args.n_reprints, args.seed)
    n = write_jsonl(args.out, docs)
    mean = sum(len(d["text"]) for d in docs) / n
    print(f"set20k: {n} docs ({args.n_real} real + {args.n_reprints} reprints), "
          f"mean {mean:,.0f} chars -> {args.out} (sha256 {sha256_file(args.out)[:16]}…)")


def family(doc: dict) -> str:
    """The template family of a real document: man pages by program (the file name up to the
    first ``_``, ``-`` or ``.``: all 16,000+ ``gcloud_*`` pages are one family), docstrings by
    top-level module, other documents on their own."""
    src = doc["source"]
    path = src.get("path", "")
    if doc["domain"] == "man":
        return "man:" + re.split(r"[_.-]", Path(path).name, maxsplit=1)[0]
    if doc["domain"] == "docstring":
        return "docstring:" + Path(path).parent.name
    return f"{doc['domain']}:{path}"


class Mosaics:
    """Records grown from real text: paragraph windows of real documents spliced together.

    Documents are drawn with weight 1/sqrt(size of their template family), so that one
    generator's pages (gcloud: 71 % of this machine's man pages) do not make up most of the
    pool, while large families still contribute more than small ones.

    A record is a window of one real document (up to 60 % of its length) with windows of other
    documents inserted at paragraph boundaries until the length drawn from the real length
    distribution is reached (one to three donors). Two records that share a
    base document therefore stay well below J 0.9, while reprints of a record land above it.
    """

    UNIT = 1500

    def __init__(self, real: list[dict], seed: int, min_len: int = 2000, max_len: int = 12000):
        self.rng = random.Random(seed)
        sizes = Counter(family(d) for d in real)
        self.cum_weights = list(itertools.accumulate(1.0 / sizes[family(d)] ** 0.5
                                                     for d in real))
        self.units = [self._units(d["text"]) for d in real]
        self.cum = []
        for units in self.units:
            cum, acc = [0], 0
            for u in units:
                acc += len(u) + 2
                cum.append(acc)
            self.cum.append(cum)
        self.domains = [d["domain"] for d in real]
        self.ids = [d["id"] for d in real]
        self.lengths = sorted(min(max(len(d["text"]), min_len), max_len) for d in real)

    @classmethod
    def _units(cls, text: str) -> list[str]:
        units: list[str] = []
        for para in text.split("\n\n"):
            if len(para) <= cls.UNIT:
                units.append(para)
                continue
            chunk: list[str] = []
            size = 0
            for line in para.split("\n"):
                chunk.append(line)
                size += len(line) + 1
                if size >= cls.UNIT:
                    units.append("\n".join(chunk))
                    chunk, size = [], 0
            if chunk:
                units.append("\n".join(chunk))
        return units

    def _window(self, doc: int, want: int) -> tuple[list[str], int]:
        """Consecutive units of ``doc`` totalling at least ``want`` characters (or all of it),
        starting at a random unit from which that size can still be reached."""
        units, cum = self.units[doc], self.cum[doc]
        total = cum[-1]
        if total <= want:
            return list(units), 0
        last_start = bisect.bisect_right(cum, total - want) - 1
        start = self.rng.randrange(last_start + 1)
        end = max(bisect.bisect_left(cum, cum[start] + want), start + 1)
        return units[start:end], start

    def _pick(self) -> int:
        return bisect.bisect_right(self.cum_weights,
                                   self.rng.random() * self.cum_weights[-1]) % len(self.units)

    def record(self) -> tuple[str, str, dict]:
        rng = self.rng
        target = self.lengths[rng.randrange(len(self.lengths))]
        base = self._pick()
        body, start = self._window(base, int(target * 0.6))
        size = sum(len(u) + 2 for u in body)
        donors = []
        share = rng.choice((1, 2))
        while size < target and len(donors) < 3:
            other = self._pick()
            win, ostart = self._window(other, max((target - size) // share, 200))
            pos = rng.randrange(len(body) + 1)
            body[pos:pos] = win
            size += sum(len(u) + 2 for u in win)
            donors.append({"id": self.ids[other], "unit": ostart})
        source = {"base": {"id": self.ids[base], "unit": start}, "spliced": donors}
        return "\n\n".join(body), self.domains[base], source


def grow(real: list[dict], n: int, seed: int, reprint_share: float, prefix: str,
         reprint_sources: list[dict] | None = None) -> Iterator[dict]:
    """``n`` records: mosaics, and after each mosaic, with the odds that give ``reprint_share``
    of reprints overall, a reprint of it (or of one of ``reprint_sources`` when given)."""
    mosaics = Mosaics(real, seed)
    rng = random.Random(seed + 1_000_003)
    p = reprint_share / (1.0 - reprint_share)
    made = 0
    m = r = 0
    while made < n:
        text, domain, source = mosaics.record()
        yield {"id": f"{prefix}m{m:07d}", "text": text, "domain": domain, "source": source}
        m += 1
        made += 1
        if made < n and rng.random() < p:
            if reprint_sources is not None:
                src = rng.choice(reprint_sources)
                src_text, src_id, src_domain = src["text"], src["id"], src["domain"]
            else:
                src_text, src_id, src_domain = text, f"{prefix}m{m - 1:07d}", domain
            donor = real[rng.randrange(len(real))]["text"]
            new, edits = reprints.reprint(src_text, rng, donor)
            if len(new) <= MAX_CHARS:
                yield {"id": f"{prefix}r{r:07d}", "text": new, "domain": src_domain,
                       "source": {"reprint_of": src_id, "edits": edits}}
                r += 1
                made += 1


def make_package(records, package_id: str, output: Path, work: Path,
                 shard_records: int = 100_000, total: int | None = None,
                 progress: bool = True) -> dict:
    """Write records to plain JSONL shards of ``shard_records`` lines and turn them into a CPT
    snapshot package (one ``data/train/part-NNNNN.jsonl`` per shard). ``progress``: the
    records written (of ``total``, when known) on stderr, as the CLI shows its own."""
    from near_dedup_core.package import create_package
    from near_dedup_core.progress import Progress

    bar = Progress(f"corpus {package_id}: records", total, enabled=progress)

    work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    count = text_bytes = chars = 0
    shards: list[Path] = []
    fh = None
    for rec in records:
        if count % shard_records == 0:
            if fh is not None:
                fh.close()
            shards.append(work / f"{package_id}.plain-{len(shards):05d}.jsonl")
            fh = open(shards[-1], "wb")
        fh.write(orjson.dumps(rec, option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE))
        count += 1
        chars += len(rec["text"])
        text_bytes += len(rec["text"].encode("utf-8", "surrogatepass"))
        bar.advance()
    if fh is not None:
        fh.close()
    bar.finish()
    bar.note(f"corpus {package_id}: creating the package from {count:,} records")
    t1 = time.monotonic()
    try:
        pkg = create_package(kind="cpt", package_id=package_id, tokenizer=TOKENIZER,
                             splits=[("train", shard) for shard in shards], depends_on=[],
                             parents=[], created_at=CREATED_AT, output=output)
    finally:
        for shard in shards:
            shard.unlink()
    t2 = time.monotonic()
    stats = {"package_id": package_id, "path": str(output), "records": count,
             "shards": len(shards), "text_bytes": text_bytes,
             "mean_chars": round(chars / max(count, 1)),
             "mean_bytes": round(text_bytes / max(count, 1)),
             "generate_seconds": round(t1 - t0, 1), "create_package_seconds": round(t2 - t1, 1)}
    (work / f"{package_id}.stats.json").write_bytes(orjson.dumps(stats, option=orjson.OPT_INDENT_2))
    print(f"created {pkg.package_id} at {output}: {count:,} records, "
          f"{text_bytes / 1e6:,.1f} MB text, mean {stats['mean_bytes']:,} B", file=sys.stderr)
    return stats


def cmd_scale(args: argparse.Namespace) -> None:
    real = list(read_jsonl(args.real))
    base = list(read_jsonl(args.set20k)) if args.with_set20k else []
    if len(base) > args.records:
        base = base[: args.records]

    def records():
        yield from base
        yield from grow(real, args.records - len(base), args.seed, args.reprint_share,
                        prefix=f"{args.package_id}-")

    print(orjson.dumps(make_package(records(), args.package_id, args.output, OUT / "work",
                                    args.shard_records, args.records, not args.quiet),
                       option=orjson.OPT_INDENT_2).decode())


def cmd_next_day(args: argparse.Namespace) -> None:
    real = list(read_jsonl(args.real))
    set20k = list(read_jsonl(args.set20k))
    records = grow(real, args.records, args.seed, args.reprint_share,
                   prefix=f"{args.package_id}-", reprint_sources=set20k)
    print(orjson.dumps(make_package(records, args.package_id, args.output, OUT / "work",
                                    args.shard_records, args.records, not args.quiet),
                       option=orjson.OPT_INDENT_2).decode())


def cmd_cumulative(args: argparse.Namespace) -> None:
    """The seed's cumulative snapshot: every record of an indexed pool package whose position
    is not a multiple of ``1 / new_share`` kept with its text (new sample ids), the others
    replaced by records of a next-day package (new content)."""
    from near_dedup_core.package import open_packages, stream_records

    pool, day = open_packages([args.pool]), open_packages([args.day])
    fresh = (rec.data for rec in stream_records(day))
    every = round(1 / args.new_share)

    def records():
        for k, rec in enumerate(stream_records(pool)):
            if k % every == 0:
                data = next(fresh, None)
                if data is not None:
                    yield {**data, "id": f"{args.package_id}-new-{k}"}
                    continue
            yield {**rec.data, "id": f"{args.package_id}-{rec.sample_id}"}

    print(orjson.dumps(make_package(records(), args.package_id, args.output, OUT / "work",
                                    args.shard_records, pool[0].record_count,
                                    not args.quiet),
                       option=orjson.OPT_INDENT_2).decode())


#: The packages the benchmarks use: name -> (subcommand, arguments). ``ensure`` builds the
#: corpus files and any of these packages that are missing, so that each benchmark is one
#: command on a fresh checkout.
PACKAGES = {
    "set20k": ("scale", ["--records", "20000", "--shard-records", "10000"]),
    "pool-10k": ("scale", ["--records", "10000", "--seed", "3", "--without-set20k"]),
    "pool-100k": ("scale", ["--records", "100000", "--seed", "1"]),
    "day-100k": ("next-day", ["--records", "5000", "--seed", "11"]),
    "pool-1m": ("scale", ["--records", "1000000", "--seed", "2"]),
    "pool-100k-mosaic": ("scale", ["--records", "100000", "--seed", "4", "--without-set20k"]),
    "day-1m": ("next-day", ["--records", "50000", "--seed", "12"]),
    "day-1m-b": ("next-day", ["--records", "50000", "--seed", "13"]),
    "day-1m-c": ("next-day", ["--records", "50000", "--seed", "14"]),
    "day-1m-fold": ("next-day", ["--records", "100000", "--seed", "15"]),
    "day-1m-d": ("next-day", ["--records", "50000", "--seed", "16"]),
    "day-1m-e": ("next-day", ["--records", "50000", "--seed", "17"]),
    "day-1m-fold2": ("next-day", ["--records", "100000", "--seed", "18"]),
    "day-1m-g": ("next-day", ["--records", "50000", "--seed", "19"]),
    "day-1m-h": ("next-day", ["--records", "50000", "--seed", "20"]),
    "cumulative-1m": ("cumulative", ["--pool", str(OUT / "pkg" / "pool-1m"),
                                     "--day", str(OUT / "pkg" / "day-1m")]),
    "cumulative-100k": ("cumulative", ["--pool", str(OUT / "pkg" / "pool-100k"),
                                       "--day", str(OUT / "pkg" / "day-100k")]),
}
PKG_DIR = OUT / "pkg"


def ensure(*packages: str) -> list[Path]:
    """Build real.jsonl, set20k.jsonl and the named packages unless they exist; their paths."""
    if not REAL.exists():
        main(["real"])
    if not SET20K.exists():
        main(["set20k"])
    paths = []
    for name in packages:
        path = PKG_DIR / name
        if not path.exists():
            command, extra = PACKAGES[name]
            if command == "cumulative":
                ensure(*(Path(extra[k]).name for k in (1, 3)))
            main([command, "--package-id", name, "--output", str(path), *extra])
        paths.append(path)
    return paths


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m bench.build_corpus", description=__doc__)
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("real", help="collect real documents into bench/corpus/real.jsonl")
    r.add_argument("--out", type=Path, default=REAL)
    r.add_argument("--max-chars", type=int, default=MAX_CHARS)
    s = sub.add_parser("set20k", help="14k real + 6k reprints")
    s.add_argument("--real", type=Path, default=REAL)
    s.add_argument("--out", type=Path, default=SET20K)
    s.add_argument("--n-real", type=int, default=14_000)
    s.add_argument("--n-reprints", type=int, default=6_000)
    s.add_argument("--seed", type=int, default=20261129)
    for name, helptext in (("scale", "a CPT package of N records grown from the 20k set"),
                           ("next-day", "a package of new content for day N+1")):
        c = sub.add_parser(name, help=helptext)
        c.add_argument("--records", type=int, required=True)
        c.add_argument("--package-id", required=True)
        c.add_argument("--output", type=Path, required=True)
        c.add_argument("--seed", type=int, default=1)
        c.add_argument("--reprint-share", type=float, default=0.3)
        c.add_argument("--real", type=Path, default=REAL)
        c.add_argument("--set20k", type=Path, default=SET20K)
        c.add_argument("--shard-records", type=int, default=100_000)
        if name == "scale":
            c.add_argument("--without-set20k", dest="with_set20k", action="store_false",
                           help="grow from real text only, without the 20k set at the start")
    c = sub.add_parser("cumulative", help="an indexed pool again, 5 %% of it replaced by new "
                                          "content (the seed's cumulative snapshot)")
    c.add_argument("--pool", type=Path, required=True)
    c.add_argument("--day", type=Path, required=True)
    c.add_argument("--new-share", type=float, default=0.05)
    c.add_argument("--package-id", required=True)
    c.add_argument("--output", type=Path, required=True)
    c.add_argument("--shard-records", type=int, default=100_000)
    return p


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    {"real": cmd_real, "set20k": cmd_set20k, "scale": cmd_scale,
     "next-day": cmd_next_day, "cumulative": cmd_cumulative}[args.command](args)


if __name__ == "__main__":
    main()
