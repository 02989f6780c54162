"""Generate the bundled sample snapshot packages from ``samples/source/``, deterministically.

    python samples/build_samples.py                  # rewrite nothing: refuses existing packages
    python samples/build_samples.py --replace        # regenerate the checked-in packages
    python samples/build_samples.py --output DIR     # write the same packages below DIR

Packages (see samples/README.md): three cumulative CPT release days
(``cpt/2026-11-25/cpt-v1``, ``cpt/2026-11-26/cpt-v2``, ``cpt/2026-11-27/cpt-v3``) and two SFT
packages (``sft/sft-v1``, ``sft/sft-v2`` with refs into sft-v1). Every derived record (a
reprint, a verbatim copy, a number change, a whitespace variant, ...) is listed in
``cpt/edits.jsonl`` / ``sft/edits.jsonl`` with the record it derives from, the kind of edit,
the character 5-gram Jaccard of the normalized compared texts and what a correct near-dedup
must conclude (``expect``). The generator checks these properties itself and fails rather
than write a sample that does not show what it claims.

Output depends only on the source files and the fixed seeds and timestamps below.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import shutil
import sys
import tempfile
import textwrap
import unicodedata
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from near_dedup_core import package as snapshot  # noqa: E402
from near_dedup_core.errors import NearDedupError  # noqa: E402

SOURCE = HERE / "source"
SEED = 20261125
THRESHOLD = 0.9
SHINGLE = 5
MIN_CHARS = 80
TOKENIZER = "qwen2-tok@r3"
CPT_DAYS = [("2026-11-25", "cpt-v1"), ("2026-11-26", "cpt-v2"), ("2026-11-27", "cpt-v3")]
SFT_CREATED = {"sft-v1": "2026-11-25T06:00:00Z", "sft-v2": "2026-11-26T06:00:00Z"}

DOMAINS = {  # domain: (source file, id prefix, dataset, paragraphs for v1 / validation / v2 / v3)
    "web": ("web.txt", "web", "web-crawl-2026-10", (9, 1, 2, 3)),
    "news": ("news.txt", "news", "regional-news-2026", (7, 1, 2, 3)),
    "code-docs": ("code-docs.txt", "doc", "python-stdlib-docs-3.11", (8, 1, 2, 3)),
    "books": ("books.txt", "book", "fiction-anthology-2026", (5, 0, 2, 2)),
}
MIRROR_DATASET = "web-crawl-2026-11"
BOILERPLATE_DATASET = "page-furniture-2026"

# Edits that reprinted text picks up on its way through other sites.
SYNONYMS = {
    "usually": "generally", "about": "around", "most": "many", "often": "frequently",
    "small": "little", "cheap": "inexpensive", "noticeably": "markedly", "said": "stated",
    "main": "principal", "whole": "entire", "good": "fine", "expected": "anticipated",
    "clearly": "obviously", "very": "really", "quickly": "fast", "surprising": "unexpected",
    "first": "initial", "begin": "start", "strong": "powerful", "steadily": "constantly",
    "nobody": "no one", "reached": "arrived at", "enough": "sufficient", "old": "aged",
}
INSERTS = {
    "web": ["Prices may vary by region.", "This guide was updated in November.",
            "Readers have asked about this often."],
    "news": ["The story is developing.", "This article has been updated.",
             "Officials did not comment further."],
    "code-docs": ["See the library reference.", "This behaviour is documented."],
    "books": ["Nobody spoke.", "It was late in the year."],
}
NAV_LINES = {
    "web": ("Home > Guides > Outdoor\n", ""),
    "news": ("", "\n\nRead more: Local news | Weather | Traffic"),
    "code-docs": ("Python documentation » Library reference\n", ""),
    "books": ("", "\n\nPrevious page | Contents | Next page"),
}
EDIT_KINDS = ["word_change", "sentence_insert", "sentence_delete", "nav_line", "typo"]
UNIT_SWAPS = [(" km", " miles"), ("USD", "CNY"), (" kg", " lb")]
SENTENCE_END = re.compile(r"(?<=[a-z0-9)\"'][.!?])\s+(?=[A-Z])")
NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
UNIT = re.compile(r"%|‰|\b(?:kg|km|ms|usd|cny|bp)\b|[元万亿]")


# ------------------------------------------------------------------ similarity


def normalize(text: str) -> str:
    """Normalization (docs/contract.md §3): NFKC, casefold, whitespace runs to one space,
    trimmed."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def jaccard(a: str, b: str) -> float:
    """Exact Jaccard of the character 5-gram sets of the normalized texts."""
    sa, sb = shingles(normalize(a)), shingles(normalize(b))
    return len(sa & sb) / len(sa | sb)


def shingles(text: str) -> set[str]:
    if len(text) < SHINGLE:
        return {text}
    return {text[i:i + SHINGLE] for i in range(len(text) - SHINGLE + 1)}


def numbers(text: str) -> list[str]:
    return NUMBER.findall(normalize(text))


def units(text: str) -> list[str]:
    return UNIT.findall(normalize(text))


def guard_equal(a: str, b: str) -> bool:
    return numbers(a) == numbers(b) and units(a) == units(b)


def expectation(original: str, derived: str) -> tuple[str, float]:
    """What a correct near-dedup concludes for the pair, and their Jaccard."""
    j = round(jaccard(original, derived), 4)
    if normalize(original) == normalize(derived):
        return "exact", j
    if min(len(normalize(original)), len(normalize(derived))) < MIN_CHARS:
        return "short_distinct", j
    if j < THRESHOLD:
        return "distinct", j
    return ("near" if guard_equal(original, derived) else "blocked"), j


# ------------------------------------------------------------------ edits


def sentence_starts(text: str) -> list[int]:
    """Offsets of the whitespace before each sentence after the first."""
    return [m.start() for m in SENTENCE_END.finditer(text)]


def edit_candidates(text: str, kind: str, domain: str) -> list[str]:
    """Every way to apply edit ``kind`` to ``text``, in a fixed order."""
    out = []
    if kind == "word_change":
        for word, synonym in SYNONYMS.items():
            for m in re.finditer(rf"\b{word}\b", text):
                out.append(text[:m.start()] + synonym + text[m.end():])
    elif kind == "sentence_insert":
        for pos in sentence_starts(text):
            for sentence in INSERTS[domain]:
                out.append(text[:pos] + " " + sentence + text[pos:])
    elif kind == "sentence_delete":
        starts = sentence_starts(text)
        for i, pos in enumerate(starts):
            end = starts[i + 1] if i + 1 < len(starts) else len(text)
            sentence = text[pos:end]
            if (not NUMBER.search(sentence) and not UNIT.search(sentence.casefold())
                    and sentence.strip() not in INSERTS[domain]):
                out.append(text[:pos] + text[end:])
    elif kind == "nav_line":
        head, tail = NAV_LINES[domain]
        if not (head and text.startswith(head)) and not (tail and text.endswith(tail)):
            out.append(head + text + tail)
    elif kind == "typo":
        for m in re.finditer(r"\b[a-z]{7,}\b", text):
            word = m.group()
            swapped = word[:3] + word[4] + word[3] + word[5:]
            out.append(text[:m.start()] + swapped + text[m.end():])
    return out


def near_edit(rng: random.Random, text: str, domain: str, kinds: list[str]) -> tuple[str, str]:
    """A reprint of ``text`` with one edit of a random kind: Jaccard ≥ THRESHOLD, numbers and
    units untouched."""
    for kind in rng.sample(kinds, len(kinds)):
        options = edit_candidates(text, kind, domain)
        for edited in rng.sample(options, len(options)):
            if (normalize(edited) != normalize(text) and guard_equal(text, edited)
                    and jaccard(text, edited) >= THRESHOLD):
                return kind, edited
    raise SystemExit(f"no edit of kinds {kinds} keeps Jaccard ≥ {THRESHOLD} for: {text[:60]!r}")


def number_change(rng: random.Random, text: str) -> str:
    """Change one digit of one number: high Jaccard, but a different fact."""
    matches = list(NUMBER.finditer(text))
    m = rng.choice(matches)
    digits = [i for i, ch in enumerate(m.group()) if ch.isdigit()]
    i = digits[-1]
    new = m.group()[:i] + str((int(m.group()[i]) + 3) % 10) + m.group()[i + 1:]
    return text[:m.start()] + new + text[m.end():]


def unit_change(text: str) -> str:
    for old, new in UNIT_SWAPS:
        if old in text:
            return text.replace(old, new, 1)
    raise SystemExit(f"no unit to change in {text[:60]!r}")


def whitespace_variant(kind: str, text: str) -> str:
    """Same normalized text, different bytes: reflowed, spaced, cased or padded."""
    if kind == "reflow":
        return textwrap.fill(" ".join(text.split()), width=72)
    if kind == "double_space":
        return SENTENCE_END.sub("  ", text)
    if kind == "nbsp":
        return re.sub(r"(\d) (?=[A-Za-z%])", "\\1\u00a0", text)
    if kind == "upper_first_sentence":
        starts = sentence_starts(text)
        cut = starts[0] if starts else len(text)
        return text[:cut].upper() + text[cut:]
    if kind == "padded":
        return "\n" + text.replace(". ", ".\r\n", 1) + "  \n"
    raise ValueError(kind)


WHITESPACE_KINDS = ["reflow", "double_space", "nbsp", "upper_first_sentence", "padded"]


# ------------------------------------------------------------------ sources


def read_paragraphs(path: Path) -> list[tuple[str | None, str]]:
    """Blank-line separated paragraphs; ``# ...`` blocks are comments, ``@ X`` names the
    origin of the paragraphs that follow."""
    origin = None
    out = []
    for block in path.read_text(encoding="utf-8").split("\n\n"):
        block = block.strip("\n")
        if not block or all(line.startswith("#") for line in block.splitlines()):
            continue
        if block.startswith("@ ") and "\n" not in block:
            origin = block[2:]
            continue
        out.append((origin, block))
    return out


def slug(text: str) -> str:
    words = re.findall(r"[a-z]+", text.casefold())[:6]
    return "-".join(words)


class Ids:
    """Per-prefix counters, shared by all versions so that new records get new ids."""

    def __init__(self) -> None:
        self.next: dict[str, int] = {}

    def __call__(self, prefix: str) -> str:
        n = self.next.get(prefix, 0) + 1
        self.next[prefix] = n
        return f"{prefix}-{n:04d}"


class Rows:
    """Row numbers per dataset, as a crawl or export would assign them."""

    def __init__(self) -> None:
        self.next: dict[str, int] = {}

    def __call__(self, dataset: str) -> int:
        n = self.next.get(dataset, 0)
        self.next[dataset] = n + 1
        return n


def original_source(rows: Rows, domain: str, origin: str | None, text: str, k: int) -> dict:
    dataset = DOMAINS[domain][2]
    if domain == "web":
        site = ["www.example.com", "blog.example.org", "guides.example.net"][k % 3]
        return {"dataset": dataset, "url": f"https://{site}/{slug(text)}", "row": rows(dataset)}
    if domain == "news":
        return {"dataset": dataset, "url": f"https://news.example.com/2026/{slug(text)}",
                "row": rows(dataset)}
    if domain == "code-docs":
        return {"dataset": dataset, "path": origin, "row": rows(dataset)}
    return {"dataset": dataset, "path": f"anthology/story-{k + 1:02d}.txt",
            "row": rows(dataset)}


def mirror_source(rows: Rows, text: str) -> dict:
    return {"dataset": MIRROR_DATASET, "url": f"https://mirror.example.net/{slug(text)}",
            "row": rows(MIRROR_DATASET)}


def cpt_record(sample_id: str, text: str, domain: str, source: dict) -> dict:
    return {"id": sample_id, "text": text, "domain": domain, "source": source}


# ------------------------------------------------------------------ CPT


class CptBuilder:
    """Builds the three cumulative CPT days and the list of derived records."""

    def __init__(self) -> None:
        self.rng = random.Random(SEED)
        self.ids = Ids()
        self.rows = Rows()
        self.edits: list[dict] = []
        self.texts: list[str] = []
        self.pools: dict[str, dict[str, list[dict]]] = {}
        for domain, (file, prefix, _dataset, counts) in DOMAINS.items():
            paragraphs = read_paragraphs(SOURCE / file)
            records = [cpt_record(self.ids(prefix), text, domain,
                                  original_source(self.rows, domain, origin, text, k))
                       for k, (origin, text) in enumerate(paragraphs)]
            if len(records) < sum(counts):
                raise SystemExit(f"{file}: {len(records)} paragraphs, need {sum(counts)}")
            cuts = [0]
            for n in counts:
                cuts.append(cuts[-1] + n)
            self.texts += [normalize(r["text"]) for r in records]
            self.pools[domain] = {name: records[cuts[i]:cuts[i + 1]]
                                  for i, name in enumerate(["v1", "validation", "v2", "v3"])}
        self.shorts = []
        for line in (SOURCE / "short.txt").read_text(encoding="utf-8").splitlines():
            if line and not line.startswith("#"):
                domain, text = line.split("\t")
                self.shorts.append(cpt_record(self.ids(DOMAINS[domain][1]), text, domain,
                                              {"dataset": BOILERPLATE_DATASET,
                                               "row": self.rows(BOILERPLATE_DATASET)}))

    def fresh(self, domain: str) -> str:
        return self.ids(DOMAINS[domain][1])

    def derive(self, package_id: str, base: dict, text: str, edit: str, expect: str) -> dict:
        """A new record derived from ``base``; checks and logs what near-dedup must find."""
        record = cpt_record(self.fresh(base["domain"]), text, base["domain"],
                            mirror_source(self.rows, text))
        found, j = expectation(base["text"], text)
        if found != expect:
            raise SystemExit(f"{record['id']} ({edit}): expected {expect}, got {found} "
                             f"(J={j})")
        if found != "exact":
            if normalize(text) in self.texts:
                raise SystemExit(f"{record['id']} ({edit}) repeats an earlier text")
            self.texts.append(normalize(text))
        self.edits.append({"package_id": package_id, "id": record["id"], "split": "train",
                           "of": {"id": base["id"]}, "edit": edit, "jaccard_char5": j,
                           "expect": found})
        return record

    def long_records(self, records: list[dict]) -> list[dict]:
        """Records long enough that a one-sentence edit keeps Jaccard above the threshold."""
        return [r for r in records if len(normalize(r["text"])) >= 300]

    def insert_randomly(self, records: list[dict], new: list[dict]) -> list[dict]:
        out = list(records)
        for record in new:
            out.insert(self.rng.randrange(len(out) + 1), record)
        return out

    def numeric_variants(self, package_id: str, candidates: list[dict], n_number: int,
                         n_unit: int) -> list[dict]:
        """Reprints with one number or one unit changed: similar text, a different fact."""
        with_numbers = [r for r in candidates if NUMBER.search(r["text"])]
        number_bases = self.rng.sample(with_numbers, n_number)
        with_units = [r for r in candidates if r not in number_bases
                      and any(old in r["text"] for old, _ in UNIT_SWAPS)]
        unit_bases = self.rng.sample(with_units, n_unit)
        return ([self.derive(package_id, base, number_change(self.rng, base["text"]),
                             "number_change", expect="blocked") for base in number_bases]
                + [self.derive(package_id, base, unit_change(base["text"]), "unit_change",
                               expect="blocked") for base in unit_bases])

    def reprints(self, package_id: str, candidates: list[dict], n: int) -> list[dict]:
        out = []
        for base in self.rng.sample(candidates, n):
            kind, text = near_edit(self.rng, base["text"], base["domain"], EDIT_KINDS)
            out.append(self.derive(package_id, base, text, kind, expect="near"))
        return out

    def verbatim(self, package_id: str, candidates: list[dict], n: int) -> list[dict]:
        return [self.derive(package_id, base, base["text"], "verbatim_copy", expect="exact")
                for base in self.rng.sample(candidates, n)]

    def whitespace(self, package_id: str, candidates: list[dict], kinds: list[str]) -> list[dict]:
        """Copies that differ only in whitespace or case: the same content after normalizing."""
        out = []
        used: list[str] = []
        for kind in kinds:
            fitting = [r for r in candidates if r["id"] not in used
                       and whitespace_variant(kind, r["text"]) != r["text"]]
            base = self.rng.choice(fitting)
            used.append(base["id"])
            out.append(self.derive(package_id, base, whitespace_variant(kind, base["text"]),
                                   f"whitespace_{kind}", expect="exact"))
        return out

    def chain(self, package_id_b: str, package_id_c: str, candidates: list[dict]):
        """A ≈ B and B ≈ C but A ≉ C: the case that must not be resolved transitively."""
        for base in candidates:
            domain = base["domain"]
            for b_kind in ("sentence_insert", "nav_line"):
                for b_text in edit_candidates(base["text"], b_kind, domain):
                    if not (THRESHOLD <= jaccard(base["text"], b_text) < 0.95
                            and guard_equal(base["text"], b_text)):
                        continue
                    for c_kind in ("sentence_delete", "sentence_insert"):
                        for c_text in edit_candidates(b_text, c_kind, domain):
                            if (jaccard(b_text, c_text) >= THRESHOLD
                                    and jaccard(base["text"], c_text) < THRESHOLD
                                    and guard_equal(b_text, c_text)):
                                b = self.derive(package_id_b, base, b_text, b_kind,
                                                expect="near")
                                c = self.derive(package_id_c, b, c_text, c_kind, expect="near")
                                self.edits.append({
                                    "package_id": package_id_c, "id": c["id"],
                                    "split": "train", "of": {"id": base["id"]},
                                    "edit": f"{b_kind}+{c_kind}",
                                    "jaccard_char5": round(jaccard(base["text"], c_text), 4),
                                    "expect": "distinct"})
                                return b, c
        raise SystemExit("no A≈B≈C chain with A≉C found")

    def build(self) -> dict[str, dict[str, list[dict]]]:
        """{package_id: {split: records}} for cpt-v1..v3."""
        pools = self.pools
        domains = list(DOMAINS)
        # --- day 1: cpt-v1
        originals = [r for d in domains for r in pools[d]["v1"]]
        self.rng.shuffle(originals)
        shorts_v1 = self.shorts[:10]
        share = next(r for r in shorts_v1 if r["text"].startswith("Share this"))
        v1_derived = self.reprints("cpt-v1", self.long_records(originals), 3)
        v1_derived.append(self.derive("cpt-v1", share, share["text"], "verbatim_copy",
                                      expect="exact"))
        v1_derived.append(self.derive("cpt-v1", share, share["text"].replace(".", "!"),
                                      "punctuation", expect="short_distinct"))
        v1_train = self.insert_randomly(originals + shorts_v1, v1_derived)
        v1_val = [r for d in domains for r in pools[d]["validation"]]
        v1_val += self.validation_copies("cpt-v1", originals, 2)

        # --- day 2: cpt-v2, cumulative
        dropped = set(r["id"] for r in self.rng.sample(originals, 3))
        carried = [r for r in v1_train if r["id"] not in dropped]
        kept_originals = [r for r in originals if r["id"] not in dropped]
        chain_b, chain_c = self.chain("cpt-v2", "cpt-v3", self.long_records(kept_originals))
        new_v2 = [r for d in domains for r in pools[d]["v2"]]
        v2_derived = (self.verbatim("cpt-v2", kept_originals, 4)
                      + self.reprints("cpt-v2", self.long_records(kept_originals), 6)
                      + [chain_b]
                      + self.numeric_variants("cpt-v2", kept_originals, 2, 1)
                      + self.whitespace("cpt-v2", kept_originals,
                                        ["reflow", "nbsp", "upper_first_sentence"])
                      + new_v2 + [self.shorts[10]])
        v2_train = self.insert_randomly(carried, v2_derived)
        v2_val = v1_val + self.validation_copies("cpt-v2", new_v2, 1)

        # --- day 3: cpt-v3, cumulative
        v2_sources = [r for r in v2_train if len(normalize(r["text"])) >= MIN_CHARS]
        dropped = set(r["id"] for r in self.rng.sample(v2_sources, 3)) - {chain_b["id"]}
        carried = [r for r in v2_train if r["id"] not in dropped]
        pool = [r for r in carried if r["id"] != chain_b["id"]
                and len(normalize(r["text"])) >= MIN_CHARS]
        new_v3 = [r for d in domains for r in pools[d]["v3"]]
        v3_derived = (self.verbatim("cpt-v3", pool, 3)
                      + self.reprints("cpt-v3", self.long_records(pool), 5)
                      + [chain_c]
                      + self.numeric_variants("cpt-v3", pool, 1, 1)
                      + self.whitespace("cpt-v3", pool, ["double_space", "padded"])
                      + new_v3 + [self.shorts[11]])
        v3_train = self.insert_randomly(carried, v3_derived)
        v3_val = v2_val + self.validation_copies("cpt-v3", new_v3, 1)
        return {"cpt-v1": {"train": v1_train, "validation": v1_val},
                "cpt-v2": {"train": v2_train, "validation": v2_val},
                "cpt-v3": {"train": v3_train, "validation": v3_val}}

    def validation_copies(self, package_id: str, train: list[dict], n: int) -> list[dict]:
        """Validation records whose text also appears in train (retained, never excluded)."""
        out = []
        for base in self.rng.sample(train, n):
            record = cpt_record(self.ids("val"), base["text"], base["domain"],
                                dict(base["source"]))
            self.edits.append({"package_id": package_id, "id": record["id"],
                               "split": "validation", "of": {"id": base["id"]},
                               "edit": "validation_copy", "jaccard_char5": 1.0,
                               "expect": "retained"})
            out.append(record)
        return out


# ------------------------------------------------------------------ SFT


def image_sha(name: str) -> str:
    return hashlib.sha256(f"images/{name}".encode()).hexdigest()


def qa_text(record: dict) -> str:
    return "\n".join(f"{m['role']}: {m['content']}" for m in record["messages"])


class SftBuilder:
    """sft-v1 (full records) and sft-v2 (refs into sft-v1, edits, new material)."""

    def __init__(self) -> None:
        self.rng = random.Random(SEED + 1)
        self.ids = Ids()
        self.rows = Rows()
        self.edits: list[dict] = []
        self.spec = json.loads((SOURCE / "sft.json").read_text(encoding="utf-8"))
        self.paragraphs = {domain: [text for _, text in read_paragraphs(SOURCE / file)]
                           for domain, (file, *_rest) in DOMAINS.items()}

    def filing_records(self, filing: dict) -> list[dict]:
        material: dict = {"text": filing["material"]}
        if filing["images"]:
            material["images"] = [{"sha256": image_sha(name)} for name in filing["images"]]
        return [{"id": self.ids("kpi"), "domain": "filings", "task": "extract_kpi",
                 "system": self.spec["systems"]["analyst"], "material": material,
                 "messages": [{"role": "user", "content": q},
                              {"role": "assistant", "content": a}],
                 "source": {"dataset": "filings-qa-2026", "document": filing["key"],
                            "row": self.rows("filings-qa-2026")}}
                for q, a in filing["qa"]]

    def summary_record(self, item: dict) -> dict:
        domain, index = item["material"].split(":")
        return {"id": self.ids("sum"), "domain": domain, "task": "summarize",
                "system": self.spec["systems"]["editor"],
                "material": {"text": self.paragraphs[domain][int(index)]},
                "messages": [{"role": "user", "content": item["question"]},
                             {"role": "assistant", "content": item["answer"]}],
                "source": {"dataset": "summaries-2026", "material": item["material"],
                           "row": self.rows("summaries-2026")}}

    def derive(self, base: dict, edit: str, expect: str, **changes) -> dict:
        record = json.loads(json.dumps(base))
        record["id"] = self.ids(base["id"].split("-")[0])
        record["source"] = {"dataset": "analyst-review-2026-11", "of": base["id"],
                            "row": self.rows("analyst-review-2026-11")}
        record.update(changes)
        same_scope = all(record.get(k) == base.get(k) for k in ("task", "system", "material"))
        found, j = expectation(qa_text(base), qa_text(record))
        if not same_scope:
            found = "other_scope"
        if found != expect:
            raise SystemExit(f"{record['id']} ({edit}): expected {expect}, got {found} (J={j})")
        self.edits.append({"package_id": "sft-v2", "id": record["id"], "split": "train",
                           "of": {"package_id": "sft-v1", "id": base["id"]}, "edit": edit,
                           "jaccard_char5": j, "expect": found})
        return record

    def with_answer(self, base: dict, answer: str) -> list[dict]:
        return [base["messages"][0], {"role": "assistant", "content": answer}]

    def edited_answer(self, base: dict) -> tuple[str, str]:
        answer = base["messages"][-1]["content"]
        kinds = ["word_change", "typo"]
        for kind in self.rng.sample(kinds, len(kinds)):
            options = edit_candidates(answer, kind, "web")
            for edited in self.rng.sample(options, len(options)):
                changed = dict(base, messages=self.with_answer(base, edited))
                found, _ = expectation(qa_text(base), qa_text(changed))
                if found == "near":
                    return kind, edited
        raise SystemExit(f"no near edit of the answer of {base['id']}")

    def build(self) -> dict[str, dict[str, list[dict]]]:
        filings, summaries = self.spec["filings"], self.spec["summaries"]
        v1_kpi = [self.filing_records(f) for f in filings[:7]]
        v1_sum = [self.summary_record(s) for s in summaries[:7]]
        v1_val = [v1_kpi[0][2], v1_kpi[2][2], v1_sum[6]]
        val_ids = [r["id"] for r in v1_val]
        v1_train = [r for group in v1_kpi for r in group] + v1_sum
        v1_train = [r for r in v1_train if r["id"] not in val_ids]

        # sft-v2: refs for what is unchanged, full records for copies, edits and new material.
        pick = self.rng.sample(v1_train, len(v1_train))
        copied, edited = pick[2:4], pick[4:8]  # pick[:2] are dropped from sft-v2
        numeric_base = next(r for r in pick[8:] if r["task"] == "extract_kpi")
        restated_base = next(r for r in pick[8:] if r["task"] == "extract_kpi"
                             and r is not numeric_base)
        imaged_base = next(r for r in pick[8:] if r.get("material", {}).get("images")
                           and r is not numeric_base and r is not restated_base)
        spaced_base = next(r for r in pick[8:] if r["task"] == "summarize")
        derived = [self.derive(b, "verbatim_copy", "exact") for b in copied]
        for base in edited:
            kind, answer = self.edited_answer(base)
            derived.append(self.derive(base, f"answer_{kind}", "near",
                                       messages=self.with_answer(base, answer)))
        answer = numeric_base["messages"][-1]["content"]
        derived.append(self.derive(numeric_base, "answer_number_change", "blocked",
                                   messages=self.with_answer(
                                       numeric_base, number_change(self.rng, answer))))
        restated = dict(restated_base["material"],
                        text=restated_base["material"]["text"] + " Figures are unaudited.")
        derived.append(self.derive(restated_base, "material_restated", "other_scope",
                                   material=restated))
        images = dict(imaged_base["material"], images=imaged_base["material"]["images"]
                      + [{"sha256": image_sha("appendix-table.png")}])
        derived.append(self.derive(imaged_base, "material_image_added", "other_scope",
                                   material=images))
        answer = spaced_base["messages"][-1]["content"]
        derived.append(self.derive(spaced_base, "answer_whitespace", "exact",
                                   messages=self.with_answer(
                                       spaced_base, whitespace_variant("double_space",
                                                                       answer))))
        new_kpi = [r for f in filings[7:] for r in self.filing_records(f)]
        new_sum = [self.summary_record(s) for s in summaries[7:]]
        untouched = [r for r in v1_train if r not in pick[:8] or r in copied]
        refs = []
        for k, base in enumerate(untouched):
            ref: dict = {"id": base["id"], "ref": {"package_id": "sft-v1", "id": base["id"]}}
            if k % 4 == 3:
                ref["source"] = {"dataset": "analyst-review-2026-11", "of": base["id"],
                                 "row": self.rows("analyst-review-2026-11")}
            refs.append(ref)
        v2_train = refs + derived + new_kpi[:-1] + new_sum
        shuffled = self.rng.sample(v2_train, len(v2_train))
        v2_val = [{"id": r["id"], "ref": {"package_id": "sft-v1", "id": r["id"]}}
                  for r in v1_val] + [new_kpi[-1]]
        return {"sft-v1": {"train": v1_train, "validation": v1_val},
                "sft-v2": {"train": shuffled, "validation": v2_val}}


# ------------------------------------------------------------------ writing


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


def write_package(work: Path, output: Path, kind: str, package_id: str,
                  splits: dict[str, list[dict]], shards: int, depends_on: list[str],
                  parents: list[str], created_at: str) -> None:
    """Write each split as ``shards`` plain JSONL files (validation: one) and create the package."""
    files = []
    for split, records in splits.items():
        n = shards if split == "train" else 1
        size = -(-len(records) // n)
        for i in range(n):
            path = work / f"{package_id}-{split}-{i}.jsonl"
            files.append((split, write_jsonl(path, records[i * size:(i + 1) * size])))
    snapshot.create_package(kind=kind, package_id=package_id,
                            tokenizer=TOKENIZER if kind == "cpt" else None, splits=files,
                            depends_on=depends_on, parents=parents, created_at=created_at,
                            output=output)


def build(output: Path, replace: bool) -> list[Path]:
    """Write all sample packages and edit lists below ``output``; returns package paths."""
    cpt = CptBuilder()
    cpt_packages = cpt.build()
    sft = SftBuilder()
    sft_packages = sft.build()
    targets = {package_id: output / "cpt" / day / package_id for day, package_id in CPT_DAYS}
    targets.update({package_id: output / "sft" / package_id for package_id in SFT_CREATED})
    edit_lists = [output / "cpt" / "edits.jsonl", output / "sft" / "edits.jsonl"]
    existing = [p for p in [*targets.values(), *edit_lists] if p.exists()]
    if existing and not replace:
        raise SystemExit(f"{existing[0]} exists; pass --replace to regenerate")
    for path in existing:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        previous: list[str] = []
        for day, package_id in CPT_DAYS:
            write_package(work, targets[package_id], "cpt", package_id, cpt_packages[package_id],
                          shards=1 if package_id == "cpt-v1" else 2, depends_on=[],
                          parents=previous[-1:], created_at=f"{day}T00:00:00Z")
            previous.append(package_id)
        write_package(work, targets["sft-v1"], "sft", "sft-v1", sft_packages["sft-v1"], 1, [], [],
                      SFT_CREATED["sft-v1"])
        write_package(work, targets["sft-v2"], "sft", "sft-v2", sft_packages["sft-v2"], 1,
                      ["sft-v1"], ["sft-v1"], SFT_CREATED["sft-v2"])
    write_jsonl(edit_lists[0], cpt.edits)
    write_jsonl(edit_lists[1], sft.edits)
    snapshot.validate_packages([targets["sft-v1"], targets["sft-v2"]])
    return list(targets.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=HERE,
                        help="folder that receives cpt/ and sft/ (default: samples/)")
    parser.add_argument("--replace", action="store_true",
                        help="remove and rewrite sample packages that already exist")
    args = parser.parse_args(argv)
    try:
        for path in build(args.output, args.replace):
            pkg = snapshot.load_package(path)
            print(f"{path}: {pkg.package_id} ({pkg.kind}, {pkg.record_count} records)")
    except NearDedupError as exc:
        print(f"build_samples: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
