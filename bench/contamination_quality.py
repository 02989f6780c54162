"""Contamination quality per item length and kind, with hard negatives, next to two peer
methods reimplemented from their published descriptions; and the speed of 100,000 items.

Real text only (none written by this project): the Debian documentation of this machine
(``/usr/share/doc``: READMEs, changelogs, copyright files, examples; ``.gz`` read through).
Its packages are split by name: four fifths are the **pool** (one document per file, cut
at blank lines into documents of at most 4,000 characters), one fifth the **source of eval
items**, never in the pool.

- **Items** per kind and length bucket (words: < 5, 5–12, 13–50, > 50): ``short_answer`` (a
  sentence), ``multiple_choice`` (a sentence as stem, four options cut from other sentences,
  an answer letter), ``code`` (a line with code characters: ``= ( ) { } $ -- ::``),
  ``numeric`` (a sentence with a number, the number its answer). Each is one of: planted
  **verbatim** in a pool document, planted **edited** (one of: case changed, punctuation
  before a space or at the end removed, or a period added where there is none; whitespace
  changed; one word replaced), planted **embedded** in a long document
  (five pool documents joined), or **clean** (not planted). A multiple-choice item is
  planted with its options every other time.
- **Hard negatives**: the 30 most frequent lines of the pool (licence and template lines of
  the copyright files, each in ≥ 10 documents); ten famous quotes, each put into three pool
  documents and listed in an allowlist (as the team would); five formulas, each put into
  twelve pool documents; and items that share only a template line with the pool (the
  template line, then a held-out sentence).
- **Measured**: recall of planted items (the item reported in its host document), clean
  items flagged (reported anywhere), hard negatives flagged as contamination, and set aside
  as ``common``, ``template`` or ``allowlist``; per kind and bucket, for near-dedup and for the peers. A
  candidate item whose words already occur in the pool as one run (``WordIndex``, which does
  not use the product) is not used: Debian's documents repeat many sentences, and such an
  item would be neither clean nor planted.
- **Peers** (bench only, not the product): *lm-eval 13-gram* (the GPT-3 / lm-eval-harness
  decontamination: lowercase, punctuation removed, whitespace tokens; an item is contaminated
  when any of its 13-grams occurs in the pool; an item under 13 tokens cannot be); and a
  *DataTrove-style 12-gram* check (``NGramsDecontFilter`` defaults: the 12-grams of the gold
  answer and the 12-grams overlapping query and answer; the answer is the option text of a
  multiple-choice item, the number of a numeric item, the last three words of a sentence
  item and the whole line of a code item).

``--what-if`` adds a bench-only row: near-dedup's pairs and, for items of 3 or 4 words with
a letter, the documents holding all of them but one in place (numbers kept), as an item of 5
words is matched (`what_if_short`): what finding a one-word edit under 5 words would cost in
clean items flagged. And a second: near-dedup's pairs without the matches by words whose
differing word is the item's rarest (fewest pool documents, `what_if_rarest`): what a rule on
*which* word of a short item may differ would cost in recall.

``--speed`` measures the throughput claim instead: ``--speed-items`` items of mixed lengths
(sentences of the held-out fifth, then of man pages, ``/usr/share/man``, read as text)
against the pool package, the ``contamination`` run next to ``index`` + ``scan`` of the same
pool, each under ``/usr/bin/time -v`` through the CLI.

    python -m bench.contamination_quality [--per-cell 40] [--seed 7] [--what-if]
    python -m bench.contamination_quality --speed [--speed-items 100000]

Outputs under ``bench/out/contamination-quality/`` (``quality.json``, ``speed.json``).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import random
import re
import shutil
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import orjson

from near_dedup_core.config import NearDedupConfig
from near_dedup_core.contamination import contamination_report
from near_dedup_core.normalize import normalize
from near_dedup_core.package import create_package

from bench.build_corpus import CREATED_AT, OUT, TOKENIZER, write_jsonl

WORK = OUT / "contamination-quality"
BUCKETS = ("<5", "5-12", "13-50", ">50")
KINDS = ("short_answer", "multiple_choice", "code", "numeric")
MODES = ("verbatim", "edited", "embedded", "clean")
EDITS = ("case", "punctuation", "whitespace", "one_word")
DOC_CHARS = 4_000
_CODE = re.compile(r"[=(){}$]|--|::")
_SENT = re.compile(r"(?<=[.!?])\s+")
_PEER_WORD = re.compile(r"[^\W_]+")
QUOTES = (  # famous public-domain quotes: hard negatives
    "Four score and seven years ago our fathers brought forth on this continent a new nation",
    "To be, or not to be, that is the question",
    "It was the best of times, it was the worst of times",
    "All happy families are alike; each unhappy family is unhappy in its own way",
    "Call me Ishmael",
    "The only thing we have to fear is fear itself",
    "In the beginning God created the heaven and the earth",
    "I think, therefore I am",
    "Ask not what your country can do for you, ask what you can do for your country",
    "That's one small step for man, one giant leap for mankind",
)
FORMULAS = ("E = mc^2", "a^2 + b^2 = c^2", "F = m a", "PV = nRT", "e^(i pi) + 1 = 0")
WHAT_IF = "what-if: one word free at 3–4 words"
WHAT_IF_RAREST = "what-if: the rarest word never differs"
TEMPLATES = ("Answer the following question.", "Choose the correct option below.",
             "Read the passage and answer.")


def bucket_of(words: int) -> str:
    return "<5" if words < 5 else "5-12" if words <= 12 else "13-50" if words <= 50 else ">50"


def doc_files() -> list[tuple[str, str]]:
    """(package name, text) of every readable text file under /usr/share/doc, in path order."""
    out = []
    for path in sorted(Path("/usr/share/doc").rglob("*")):
        if not path.is_file() or path.is_symlink() or path.stat().st_size > 2_000_000:
            continue
        try:
            raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else \
                path.read_bytes()
            text = raw.decode("utf-8")
        except (OSError, UnicodeDecodeError, gzip.BadGzipFile, EOFError):
            continue
        if len(text) >= 200 and "\x00" not in text:
            out.append((path.relative_to("/usr/share/doc").parts[0], text))
    return out


def split_docs(text: str) -> list[str]:
    docs, cur = [], ""
    for para in re.split(r"\n\s*\n", text):
        if cur and len(cur) + len(para) > DOC_CHARS:
            docs.append(cur)
            cur = ""
        cur = f"{cur}\n\n{para}" if cur else para
    if cur.strip():
        docs.append(cur)
    return [d[:DOC_CHARS * 2] for d in docs if len(d.strip()) >= 100]


def held_out(name: str) -> bool:
    return int(hashlib.sha256(name.encode()).hexdigest(), 16) % 5 == 0


def sentences(texts: list[str]) -> list[str]:
    out: dict[str, None] = {}
    for text in texts:
        for para in re.split(r"\n\s*\n", text):
            flat = " ".join(para.split())
            for s in _SENT.split(flat):
                if 3 <= len(s.split()) and any(c.isalpha() for c in s) and len(s) < 2_000:
                    out.setdefault(s)
    return list(out)


def code_lines(texts: list[str]) -> list[str]:
    out: dict[str, None] = {}
    for text in texts:
        for line in text.splitlines():
            line = line.strip()
            if _CODE.search(line) and 3 <= len(line.split()) and any(c.isalpha() for c in line):
                out.setdefault(line)
    return list(out)


def long_items(sents: list[str]) -> list[str]:
    """Runs of consecutive sentences of 51–150 words."""
    out, cur = [], []
    for s in sents:
        cur.append(s)
        n = sum(len(x.split()) for x in cur)
        if n > 50:
            if n <= 150:
                out.append(" ".join(cur))
            cur = []
    return out


class WordIndex:
    """Every word of the pool (``peer_tokens``) as ids, documents apart, and each word's
    positions: whether an item's words occur in the pool as one run, independently of the
    product (items that do are not used: the pool would already hold them)."""

    def __init__(self, docs: list[str]):
        vocab: dict[str, int] = {}
        ids: list[int] = []
        for d in docs:
            ids.extend(vocab.setdefault(w, len(vocab) + 1) for w in peer_tokens(d))
            ids.append(0)
        self.vocab = vocab
        self.ids = np.asarray(ids, dtype=np.int32)
        self.order = np.argsort(self.ids, kind="stable")
        self.count = np.bincount(self.ids, minlength=len(vocab) + 1)
        self.start = np.concatenate([[0], np.cumsum(self.count)])

    def holds(self, text: str) -> bool:
        return bool(len(self.runs([self.vocab.get(w, -1) for w in peer_tokens(text)])))

    def runs(self, words: list[int], free: int = -1) -> np.ndarray:
        """Where the words (ids) occur as one run, any word but 0 at position ``free``."""
        fixed = [j for j in range(len(words)) if j != free]
        if not fixed or any(words[j] == -1 for j in fixed):
            return np.zeros(0, dtype=np.int64)
        rare = min(fixed, key=lambda j: self.count[words[j]])
        w = words[rare]
        at = self.order[self.start[w]:self.start[w + 1]] - rare
        at = at[(at >= 0) & (at + len(words) <= len(self.ids))]
        for j in fixed:
            at = at[self.ids[at + j] == words[j]]
            if not len(at):
                break
        return at[self.ids[at + free] != 0] if free >= 0 else at

    def docs(self, at: np.ndarray) -> set[int]:
        """The documents (in the order given) of positions ``at``."""
        return set(np.searchsorted(np.flatnonzero(self.ids == 0), at).tolist())


def what_if_short(items: list[tuple[dict, dict]], pool: list[dict], pairs: dict[str, set[str]],
                  common: int) -> dict[str, set[str]]:
    """The training documents each item would be reported in if an item of 3 or 4 words
    with a letter (and at most 16 words: found by its words) had one of them free (numbers
    kept), as an item of 5 has: the product's pairs and those near copies, the near copies
    set aside when the item is then matched in ``common`` documents or more. Bench only:
    the measured cost of the recall that the product does not claim under 5 words."""
    index = WordIndex([d["text"] for d in pool])
    out = {}
    for rec, _ in items:
        found = set(pairs.get(rec["id"], ()))
        near: set[str] = set()
        fields = [rec["text"]] + (["\n".join([rec["text"], *rec["choices"]])]
                                  if "choices" in rec else [])
        for text in fields:
            tokens = peer_tokens(text)
            letters = [j for j, t in enumerate(tokens) if not t.isdigit()]
            if len(tokens) > 16 or len(letters) not in (3, 4):
                continue
            words = [index.vocab.get(t, -1) for t in tokens]
            whole = {pool[k]["id"] for k in index.docs(index.runs(words))}
            for j in letters:  # the product has judged the whole copies (pairs, set aside)
                near |= {pool[k]["id"] for k in index.docs(index.runs(words, j))} - whole
        out[rec["id"]] = found if len(found | near) >= common else found | near
    return out


def what_if_rarest(pool: list[dict], rows: list[dict]) -> dict[str, set[str]]:
    """The training documents each item is reported in when a match by words (``exact``)
    whose differing words include the item's rarest word with a letter (the fewest pool
    documents, ties all rarest) is no match. Bench only: the measured cost of such a rule."""
    df: Counter = Counter()
    for d in pool:
        df.update(set(_PEER_WORD.findall(normalize(d["text"]))))
    out: dict[str, set[str]] = defaultdict(set)
    for row in rows:
        mine = _PEER_WORD.findall(row["item_text"])
        theirs = _PEER_WORD.findall(row["training_text"])
        if row["method"] == "exact" and row["common_shingles"] < row["item_shingles"]:
            least = min(df[w] for w in mine if not w.isdigit())
            if any(a != b and df[a] == least for a, b in zip(mine, theirs, strict=True)):
                continue
        out[row["eval"]["sample_id"]].add(row["training"]["sample_id"])
    return out


def edit(rng: random.Random, text: str, how: str, vocab: list[str]) -> str:
    words = text.split(" ")
    if how == "case":
        return " ".join(w.upper() if rng.random() < 0.5 else w.title() for w in words)
    if how == "punctuation":
        stripped = re.sub(r"[.,;:!?](?=\s|$)", "", text)  # clause punctuation, not "3.14"
        return stripped + "." if stripped == text else stripped
    if how == "whitespace":
        return "".join(w + rng.choice(["  ", "\n", " \t "]) for w in words).strip()
    long = [i for i, w in enumerate(words) if len(w) >= 3 and w.isalpha()] or \
        list(range(len(words)))
    i = rng.choice(long)
    words[i] = rng.choice(vocab)
    return " ".join(words)


def plant(rng: random.Random, host: str, piece: str) -> str:
    cuts = [m.end() for m in re.finditer(r"[.!?]\s|\n", host)] or [len(host)]
    at = rng.choice(cuts)
    return host[:at] + " " + piece + " " + host[at:]


def hard_negatives(rng: random.Random, pool_docs: list[str], hosts: list[int],
                   items: list, take) -> list[dict]:
    """Licence and template lines frequent in the pool, quotes (allowlisted) and formulas
    planted in pool documents, and items sharing only a template line; returns the
    allowlist."""
    line_df: Counter = Counter()
    for d in pool_docs:
        line_df.update({" ".join(x.split()) for x in d.splitlines()
                        if 5 <= len(x.split()) <= 40})
    frequent = [line for line, n in line_df.most_common(200) if n >= 10][:30]
    negatives = [("licence", line) for line in frequent]
    allow = []
    for q in QUOTES:
        for _ in range(3):
            h = hosts.pop()
            pool_docs[h] = plant(rng, pool_docs[h], q + ".")
        negatives.append(("quote", q))
        allow.append({"text": q, "reason": "famous quote, public domain"})
    for f in FORMULAS:
        for _ in range(12):
            h = hosts.pop()
            pool_docs[h] = plant(rng, pool_docs[h], f"where {f} holds")
        negatives.append(("formula", f))
    for t in TEMPLATES:
        for _ in range(12):
            h = hosts.pop()
            pool_docs[h] = plant(rng, pool_docs[h], t)
        for _ in range(10):
            s = take()
            if s is not None:
                negatives.append(("template", f"{t} {s}"))
    for n, (what, text) in enumerate(negatives):
        items.append(({"id": f"neg-{what}-{n}", "text": text},
                      {"kind": what, "bucket": bucket_of(len(text.split())), "mode": "negative",
                       "edit": None, "host": None}))
    return allow


def build(per_cell: int, seed: int) -> dict:
    rng = random.Random(seed)
    files = doc_files()
    pool_docs = [d for name, text in files if not held_out(name) for d in split_docs(text)]
    source = [text for name, text in files if held_out(name)]
    index = WordIndex(pool_docs)
    sents = sentences(source)
    rng.shuffle(sents)
    vocab = [w for s in sents[:2000] for w in s.split() if w.isalpha() and len(w) >= 4]
    # disjoint parts: sentences for items, for long items (runs of them), for options
    by_bucket: dict[str, list[str]] = defaultdict(list)
    for s in sents[0::3]:
        by_bucket[bucket_of(len(s.split()))].append(s)
    by_bucket[">50"] = long_items(sents[1::3])
    option_words = sents[2::3]
    lines = code_lines(source)
    rng.shuffle(lines)
    codes: dict[str, list[str]] = defaultdict(list)
    for line in lines[0::2]:
        codes[bucket_of(len(line.split()))].append(line)
    codes[">50"] = [" ".join(c) for c in zip(*[iter(lines[1::2])] * 12, strict=False)
                    if len(" ".join(c).split()) > 50]
    used: set[str] = set()

    def take(pool: list[str], pred=lambda s: True) -> str | None:
        while pool:
            s = pool.pop()
            if s not in used and pred(s) and not index.holds(s):
                used.add(s)
                return s
        return None

    items = []
    planted_pieces: list[str] = []
    hosts = list(range(len(pool_docs)))
    rng.shuffle(hosts)
    long_docs: list[str] = []
    for kind in KINDS:
        for b in BUCKETS:
            for mode in MODES:
                for k in range(per_cell):
                    src = codes[b] if kind == "code" else by_bucket[b]
                    s = take(src, (lambda x: bool(re.search(r"\d", x))) if kind == "numeric"
                             else (lambda x: True))
                    if s is None:
                        break
                    rec: dict = {"id": f"{kind}-{b}-{mode}-{k}", "text": s}
                    planted = s
                    if kind == "multiple_choice":
                        opts = [" ".join(rng.choice(option_words).split()[:3])
                                for _ in range(4)]
                        rec["choices"] = [f"{'ABCD'[i]}. {o}" for i, o in enumerate(opts)]
                        rec["answer"] = "B"
                        if k % 2:
                            planted = s + "\n" + "\n".join(rec["choices"])
                    meta = {"kind": kind, "bucket": b, "mode": mode, "edit": None, "host": None}
                    if mode == "edited":
                        meta["edit"] = EDITS[k % len(EDITS)]
                        planted = edit(rng, planted, meta["edit"], vocab)
                    if mode != "clean":
                        planted_pieces.append(planted)
                    if mode in ("verbatim", "edited"):
                        h = hosts.pop()
                        pool_docs[h] = plant(rng, pool_docs[h], planted)
                        meta["host"] = f"d{h}"
                    elif mode == "embedded":
                        meta["host"] = f"long{len(long_docs)}"
                        joined = "\n\n".join(pool_docs[hosts.pop()] for _ in range(5))
                        long_docs.append(plant(rng, joined, planted))
                    items.append((rec, meta))
    # a clean item inside another item's planted text (a sentence within a longer one) is
    # not clean: left out
    inside = WordIndex(planted_pieces)
    items = [(rec, meta) for rec, meta in items
             if meta["mode"] != "clean" or not inside.holds(rec["text"])]
    allow = hard_negatives(rng, pool_docs, hosts, items, lambda: take(by_bucket["5-12"]))
    return {"pool": [{"id": f"d{i}", "text": t} for i, t in enumerate(pool_docs)] +
            [{"id": f"long{i}", "text": t} for i, t in enumerate(long_docs)],
            "items": items, "allow": allow}


def peer_tokens(text: str) -> list[str]:
    return _PEER_WORD.findall(text.lower())


def ngrams(tokens: list[str], n: int) -> set[str]:
    return {" ".join(tokens[i:i + n]) for i in range(len(tokens) - n + 1)}


def answer_of(rec: dict, meta: dict) -> str:
    if meta["kind"] == "multiple_choice":
        return rec["choices"][1][3:]
    if meta["kind"] == "numeric":
        return re.search(r"\d+", rec["text"]).group(0)  # type: ignore[union-attr]
    if meta["kind"] == "code":
        return rec["text"]
    words = rec["text"].split()
    return " ".join(words[-3:])


def peers(items: list[tuple[dict, dict]], pool: list[dict]) -> dict[str, set[str]]:
    """Item ids each peer flags."""
    want: dict[str, dict[str, set[str]]] = {"lm-eval 13-gram": defaultdict(set),
                                            "DataTrove-style 12-gram": defaultdict(set)}
    for rec, meta in items:
        for g in ngrams(peer_tokens(rec["text"]), 13):
            want["lm-eval 13-gram"][g].add(rec["id"])
        ans = answer_of(rec, meta)
        query = rec["text"][:-len(ans)] if rec["text"].endswith(ans) else rec["text"]
        q, a = peer_tokens(query), peer_tokens(ans)
        grams = ngrams(a, 12)
        joined = q + a
        for i in range(max(len(q) - 11, 0), len(q)):  # overlapping query and answer
            if i + 12 <= len(joined) and i + 12 > len(q):
                grams.add(" ".join(joined[i:i + 12]))
        for g in grams:
            want["DataTrove-style 12-gram"][g].add(rec["id"])
    flagged: dict[str, set[str]] = {name: set() for name in want}
    for doc in pool:
        toks = peer_tokens(doc["text"])
        for name, n in (("lm-eval 13-gram", 13), ("DataTrove-style 12-gram", 12)):
            table = want[name]
            for i in range(len(toks) - n + 1):
                hit = table.get(" ".join(toks[i:i + n]))
                if hit:
                    flagged[name] |= hit
    return flagged


def quality(args: argparse.Namespace) -> None:
    WORK.mkdir(parents=True, exist_ok=True)
    data = build(args.per_cell, args.seed)
    src = WORK / "src"
    shutil.rmtree(src, ignore_errors=True)
    write_jsonl(src / "pool.jsonl", data["pool"])
    write_jsonl(src / "items.jsonl", [rec for rec, _ in data["items"]])
    (src / "allowlist.jsonl").write_bytes(b"".join(orjson.dumps(a) + b"\n"
                                                   for a in data["allow"]))
    for name in ("pool", "evals", "report"):
        shutil.rmtree(WORK / name, ignore_errors=True)
    pool = create_package(kind="cpt", package_id="debian-doc-pool", tokenizer=TOKENIZER,
                          splits=[("train", src / "pool.jsonl")], depends_on=[], parents=[],
                          created_at=CREATED_AT, output=WORK / "pool").path
    evals = create_package(kind="cpt", package_id="quality-evals", tokenizer="eval-tok@1",
                           splits=[("test", src / "items.jsonl")], depends_on=[], parents=[],
                           created_at=CREATED_AT, output=WORK / "evals").path
    contamination_report(NearDedupConfig(), [evals], [pool], WORK / "report",
                         workers=args.workers, allowlist=src / "allowlist.jsonl")
    pairs: dict[str, set[str]] = defaultdict(set)
    rows = [orjson.loads(raw) for raw in
            (WORK / "report" / "contamination.jsonl").read_bytes().splitlines()]
    for row in rows:
        pairs[row["eval"]["sample_id"]].add(row["training"]["sample_id"])
    aside = {orjson.loads(r)["eval"]["sample_id"]: orjson.loads(r)["reason"]
             for r in (WORK / "report" / "set_aside.jsonl").read_bytes().splitlines()}
    peer = peers(data["items"], data["pool"])
    methods = {"near-dedup": lambda rid, meta: (meta["host"] in pairs[rid]
                                                if meta["host"] else bool(pairs[rid]))}
    for name, ids in peer.items():
        methods[name] = lambda rid, meta, ids=ids: rid in ids
    if args.what_if:
        wider = what_if_short(data["items"], data["pool"], pairs,
                              NearDedupConfig().contamination_common_samples)
        methods[WHAT_IF] = lambda rid, meta: (meta["host"] in wider.get(rid, ())
                                              if meta["host"] else bool(wider.get(rid)))
        rarest = what_if_rarest(data["pool"], rows)
        methods[WHAT_IF_RAREST] = lambda rid, meta: (meta["host"] in rarest.get(rid, ())
                                                     if meta["host"] else bool(rarest.get(rid)))
    table: dict = defaultdict(lambda: defaultdict(Counter))
    for rec, meta in data["items"]:
        rid = rec["id"]
        cell = (meta["kind"], meta["bucket"])
        for name, found in methods.items():
            c = table[name][cell]
            mode = meta["mode"]
            c[f"{mode}_n"] += 1
            hit = found(rid, meta)
            c[f"{mode}_hit"] += hit
            if mode == "edited":
                c[f"edit_{meta['edit']}_n"] += 1
                c[f"edit_{meta['edit']}_hit"] += hit
            if mode == "negative" and name == "near-dedup" and rid in aside:
                c[f"negative_{aside[rid]}"] += 1
    out = {name: {f"{k}|{b}": dict(c) for (k, b), c in cells.items()}
           for name, cells in table.items()}
    (WORK / "quality.json").write_bytes(orjson.dumps(
        {"per_cell": args.per_cell, "seed": args.seed, "pool_documents": len(data["pool"]),
         "items": len(data["items"]), "methods": out}, option=orjson.OPT_INDENT_2))
    print(render(out, len(data["pool"]), len(data["items"])))


def _rate(c: Counter, mode: str) -> str:
    n = c.get(f"{mode}_n", 0)
    return f"{c.get(f'{mode}_hit', 0) / n:.2f} ({n})" if n else "—"


def render(out: dict, pool_docs: int, n_items: int) -> str:
    lines = [f"pool: {pool_docs:,} documents; items: {n_items:,}", "",
             "| method | kind | words | verbatim | edited | embedded | clean flagged |",
             "|---|---|---|---:|---:|---:|---:|"]
    for name, cells in out.items():
        for key in sorted(cells, key=lambda k: (KINDS.index(k.split("|")[0])
                                                if k.split("|")[0] in KINDS else 9,
                                                k.split("|")[0], BUCKETS.index(k.split("|")[1]))):
            kind, b = key.split("|")
            c = Counter(cells[key])
            if kind not in KINDS:
                continue
            lines.append(f"| {name} | {kind} | {b} | {_rate(c, 'verbatim')} | "
                         f"{_rate(c, 'edited')} | {_rate(c, 'embedded')} | "
                         f"{_rate(c, 'clean')} |")
    lines += ["", "| method | edit | recall |", "|---|---|---:|"]
    for name, cells in out.items():
        for e in EDITS:
            n = sum(Counter(c).get(f"edit_{e}_n", 0) for c in cells.values())
            h = sum(Counter(c).get(f"edit_{e}_hit", 0) for c in cells.values())
            lines.append(f"| {name} | {e} | {h / n:.3f} ({n}) |" if n else f"| {name} | {e} | — |")
    lines += ["", "| method | words | " + " | ".join(EDITS) + " |",
              "|---|---|" + "---:|" * len(EDITS)]
    for name, cells in out.items():  # edited recall by edit and bucket, all kinds
        for b in BUCKETS:
            got = [Counter() for _ in EDITS]
            for key, c in cells.items():
                if key.split("|")[0] in KINDS and key.split("|")[1] == b:
                    for k, e in enumerate(EDITS):
                        got[k]["n"] += c.get(f"edit_{e}_n", 0)
                        got[k]["hit"] += c.get(f"edit_{e}_hit", 0)
            lines.append(f"| {name} | {b} | " + " | ".join(
                f"{g['hit']}/{g['n']}" for g in got) + " |")
    lines += ["", "| method | hard negative | items | flagged as contamination | common | "
              "template | allowlist |", "|---|---|---:|---:|---:|---:|---:|"]
    for name, cells in out.items():
        neg: dict[str, Counter] = defaultdict(Counter)
        for key, c in cells.items():
            if key.split("|")[0] not in KINDS:
                neg[key.split("|")[0]].update(c)
        for what, c in sorted(neg.items()):
            lines.append(f"| {name} | {what} | {c['negative_n']} | {c['negative_hit']} | "
                         f"{c.get('negative_common', 0)} | {c.get('negative_template', 0)} | "
                         f"{c.get('negative_allowlist', 0)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument("--per-cell", type=int, default=40, help="items per kind, bucket and mode")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--what-if", action="store_true",
                    help="also: one word free in items of 3 or 4 words (bench only)")
    ap.add_argument("--speed", action="store_true", help="measure the speed instead")
    ap.add_argument("--speed-items", type=int, default=100_000)
    ap.add_argument("--speed-absent", action="store_true",
                    help="speed: leave out items the pool already holds")
    args = ap.parse_args(argv)
    if args.speed:
        from bench.contamination_speed import speed

        speed(args)
    else:
        quality(args)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
