"""The numeric/unit guard on real text: blocked rates and cost, the nd-2 guard against the current one.

Texts: paragraphs (≥ 200 normalized characters) of the Chinese man pages (Debian package
``manpages-zh``, below /usr/share/man/zh_CN, troff stripped by ``bench.troff``) and the CPT
texts of the bundled samples (English). Every pair below is (paragraph, edited paragraph); only
near pairs count (exact Jaccard of the product's shingle sets ≥ the configured threshold),
because the guard sees no other pairs.

Changed-quantity pairs (every one should be blocked):
- ``real_arabic``: one digit of an Arabic number in the text changed;
- ``real_chinese``: a Chinese numeral in the text changed where the text counts with it — a
  numeral before a measure word or unit (三个, 两种, 八比特), or after 第 — to another digit;
- ``real_unit``: a unit after an Arabic number swapped for one of its family (字节 → 比特,
  秒 → 分钟, kb → mb, % → ‰);
- injected: a phrase put between two sentences of the paragraph, once with one quantity and
  once with another: amounts (三万元 → 五万元, 两千五百元, 叁佰元), years (二〇一九年, 2019年),
  percentages (百分之三, 3%), ordinals (第三章), fractions (三分之一), mixed forms (3.5万,
  1亿2千万), Chinese and word units (5公斤 → 5公里, 3万元 → 3万美元, usd 5 → eur 5). Values
  are drawn at random and rendered by this module's own numeral writer.

Quantity-preserving pairs (none should be blocked):
- ``word_delete`` / ``word_swap``: an ordinary word (no digit, no numeral character) deleted,
  or two neighbouring ones swapped (the man pages are segmented by spaces; the English
  samples by their words);
- ``numeral_word_delete`` / ``numeral_word_insert``: a word that contains a numeral or unit
  character but is no quantity (统一, 一些, 一样, 万一, 千万, 一般, 十分, 百姓, 部分, 股份,
  米饭 …, see ``ORDINARY_NUMERAL_WORDS``) deleted where the text has it, or inserted between
  two words;
- ``char_delete``: three random characters deleted (the issue's measurement), none of them a
  digit or numeral and none within two characters of one.
No edit touches a number, and none makes one: the words around an edit hold no digit or
numeral.

Cost: the verify stage computes each content's sequences once per batch and compares them per
pair; the figure is that work divided by the pairs, per guard, best of ``--rounds`` alternating
rounds (the machine is shared, so the minimum is the stable figure), plus ns per character.

Usage: ``python -m bench.guard [--seed 1] [--rounds 7] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path

from near_dedup_core.config import NearDedupConfig
from near_dedup_core.guard import Guard
from near_dedup_core.normalize import normalize
from near_dedup_core.signature import MinHasher, exact_jaccard

ROOT = Path(__file__).resolve().parent.parent
ZH_MAN = Path("/usr/share/man/zh_CN")

# --------------------------------------------------------------------------- the nd-2 guard


class NdTwoGuard:
    """The guard of algorithm nd-2, verbatim: Arabic digit runs only; symbol units (分, 米, 股 …)
    counted wherever they occur; word units after a number, currency codes before one."""

    SYMBOL_UNITS = ("%", "‰", "‱", "°", "℃", "℉", "$", "¥", "€", "£", "₩", "₹",
                    "元", "角", "分", "万", "亿", "兆", "千", "百", "吨", "斤", "公斤", "公里", "米",
                    "股", "倍")
    WORD_UNITS = ("kg", "g", "mg", "lb", "oz", "km", "m", "cm", "mm", "nm", "mi", "ft",
                  "ms", "ns", "s", "sec", "min", "h", "hr", "hrs", "kb", "mb", "gb", "tb",
                  "kib", "mib", "gib", "tib", "hz", "khz", "mhz", "ghz", "w", "kw", "mw", "kwh",
                  "v", "mv", "kv", "ma", "l", "ml", "usd", "cny", "rmb", "eur", "gbp", "jpy",
                  "hkd", "bp", "bps", "pp", "x")
    PREFIX_UNITS = ("usd", "cny", "rmb", "eur", "gbp", "jpy", "hkd")
    _NUMBER = re.compile(r"\d+(?:[.,]\d+)*")

    def __init__(self) -> None:
        words = sorted(set(self.WORD_UNITS), key=lambda t: (-len(t), t))
        symbols = sorted(set(self.SYMBOL_UNITS), key=lambda t: (-len(t), t))
        prefixes = sorted(self.PREFIX_UNITS, key=lambda t: (-len(t), t))
        alt = lambda tokens: "|".join(re.escape(t) for t in tokens)  # noqa: E731 (nd-2 verbatim)
        self._after = re.compile(rf" ?({alt(words)})(?![^\W\d_])")
        self._before = re.compile(rf"(?<![^\W\d_])({alt(prefixes)}) ?$")
        self._symbols = re.compile(alt(symbols))

    def sequences(self, text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        numbers = []
        units: dict[int, str] = {}
        for m in self._NUMBER.finditer(text):
            numbers.append(m.group())
            after = self._after.match(text, m.end())
            if after:
                units[after.start(1)] = after.group(1)
            before = self._before.search(text, max(0, m.start() - 5), m.start())
            if before:
                units[before.start(1)] = before.group(1)
        for m in self._symbols.finditer(text):
            units[m.start()] = m.group()
        return tuple(numbers), tuple(units[k] for k in sorted(units))


# --------------------------------------------------------------------------- texts

CJK = re.compile(r"[\u4e00-\u9fff]")
#: Digits and every character the guard may read as a Chinese numeral.
NUMERAL = re.compile(r"[\d〇零一二两兩三四五六七八九十百千万亿壹贰貳叁參肆伍陆陸柒捌玖拾佰仟萬億]")
#: Words with a numeral or unit character that are no quantity (the issue's list and more).
ORDINARY_NUMERAL_WORDS = (
    "统一", "一些", "一样", "万一", "千万", "一般", "一起", "唯一", "一直", "之一", "十分",
    "百姓", "千万别", "部分", "股份", "米饭", "分别", "分析", "一切", "一定", "一致", "一旦",
    "同一", "单一", "一下", "一律", "一并", "一再", "一向", "一共", "一同", "一点", "充分",
    "成功", "天气", "日常", "月亮", "元素", "股东", "百货", "万分", "一流", "十足", "四周",
    "三角", "五金", "八卦", "零件", "零售", "一时", "一度", "一部分", "千方百计", "万无一失",
    "一模一样", "乱七八糟", "三心二意", "一心一意", "百分比", "倍增", "米兰", "分钟数", "十字",
    "一番", "一阵", "万物", "九州", "不一", "一口气", "大陆", "陆续", "收拾", "队伍")


def zh_paragraphs(limit: int | None = None, texts: Iterable[str] | None = None) -> list[str]:
    """Normalized paragraphs of the Chinese man pages (or of ``texts``, plain text whose
    paragraphs are separated by blank lines): ≥ 200 characters, ≥ 40 of them CJK."""
    from bench.sources import man_pages

    if texts is None:
        texts = (text for text, _meta in man_pages(ZH_MAN))
    seen: dict[str, None] = {}
    for text in texts:
        for para in re.split(r"\n\s*\n", text):
            norm = normalize(para)
            if 200 <= len(norm) <= 4000 and len(CJK.findall(norm)) >= 40:
                seen.setdefault(norm)
    out = list(seen)
    return out[:limit] if limit else out


def sample_paragraphs() -> list[str]:
    """Normalized CPT texts of the bundled samples with ≥ 200 characters, each once."""
    seen: dict[str, None] = {}
    for path in sorted((ROOT / "samples" / "cpt").rglob("*.jsonl")):
        if path.name == "edits.jsonl":
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            text = normalize(json.loads(line).get("text", ""))
            if len(text) >= 200:
                seen.setdefault(text)
    return list(seen)


# --------------------------------------------------------------------------- numeral writer

_CN_DIGITS = "零一二三四五六七八九"
_CAPITALS = "零壹贰叁肆伍陆柒捌玖"


def chinese(n: int, rng: random.Random, capitals: bool = False) -> str:
    """``n`` (1 ≤ n < 10^12) as a positional Chinese numeral (sections of four digits with 万
    and 亿, inner zeros as one 零, 一十 shortened to 十 at the start, 2 sometimes 两)."""
    digits, small = (_CAPITALS, "拾佰仟") if capitals else (_CN_DIGITS, "十百千")

    def section(v: int) -> str:
        out: list[str] = []
        zero = False
        for power in (3, 2, 1, 0):
            d = v // 10**power % 10
            if d == 0:
                zero = bool(out)
                continue
            if zero:
                out.append(digits[0])
                zero = False
            ch = digits[d]
            if d == 2 and power >= 2 and not capitals and rng.random() < 0.5:
                ch = "两"
            out.append(ch + (small[power - 1] if power else ""))
        return "".join(out)

    parts: list[str] = []
    for big, mark in ((10**8, "亿"), (10**4, "万"), (1, "")):
        v = n // big % 10**4 if big < 10**8 else n // big
        if v:
            if parts and v < 1000 and parts[-1] != digits[0]:
                parts.append(digits[0])
            parts.append(section(v) + mark)
        elif parts and parts[-1] != digits[0]:
            parts.append(digits[0])
    text = "".join(parts).rstrip(digits[0])
    if not capitals and text.startswith("一十"):
        text = text[1:]
    return text


def digit_by_digit(n: int) -> str:
    return "".join("〇一二三四五六七八九"[int(c)] for c in str(n))


def _other(rng: random.Random, low: int, high: int, not_: int) -> int:
    while True:
        v = rng.randint(low, high)
        if v != not_:
            return v


def injected_phrases(rng: random.Random) -> list[tuple[str, str, str]]:
    """(category, phrase A, phrase B): one draw of every injected changed-quantity kind."""
    v = rng.randint(1, 99999)
    w = _other(rng, 1, 99999, v)
    y = rng.randint(1950, 2049)
    y2 = _other(rng, 1950, 2049, y)
    p = rng.randint(1, 99)
    p2 = _other(rng, 1, 99, p)
    k = rng.randint(1, 99)
    k2 = _other(rng, 1, 99, k)
    d, d2 = rng.sample(range(2, 10), 2)
    a, b = rng.randint(1, 9), rng.randint(1, 9)
    b2 = _other(rng, 1, 9, b)
    unit_a, unit_b = rng.sample(["公斤", "公里", "吨", "米", "升", "小时", "天"], 2)
    cur_a, cur_b = rng.sample(["usd", "eur", "cny", "gbp"], 2)
    return [
        ("amount_chinese", f"本期金额为{chinese(v, rng)}万元。", f"本期金额为{chinese(w, rng)}万元。"),
        ("amount_chinese", f"合计{chinese(v, rng)}元整。", f"合计{chinese(w, rng)}元整。"),
        ("amount_capitals", f"人民币{chinese(v, rng, True)}元整。",
         f"人民币{chinese(w, rng, True)}元整。"),
        ("amount_arabic", f"营业收入{v}万元。", f"营业收入{w}万元。"),
        ("year_chinese", f"该版本于{digit_by_digit(y)}年发布。", f"该版本于{digit_by_digit(y2)}年发布。"),
        ("year_arabic", f"该版本于{y}年发布。", f"该版本于{y2}年发布。"),
        ("percent_chinese", f"同比增长百分之{chinese(p, rng)}。", f"同比增长百分之{chinese(p2, rng)}。"),
        ("percent_arabic", f"同比增长{p}%。", f"同比增长{p2}%。"),
        ("ordinal_chinese", f"详见第{chinese(k, rng)}章。", f"详见第{chinese(k2, rng)}章。"),
        ("fraction_chinese", f"约占{chinese(d, rng)}分之一。", f"约占{chinese(d2, rng)}分之一。"),
        ("mixed", f"规模达{a}.{b}万亿元。", f"规模达{a}.{b2}万亿元。"),
        ("mixed", f"共计{a}亿{b}千万股。", f"共计{a}亿{b2}千万股。"),
        ("unit_chinese", f"重量为{k}{unit_a}。", f"重量为{k}{unit_b}。"),
        ("unit_currency", f"约{a}万元。", f"约{a}万美元。"),
        ("unit_word", f"price {cur_a} {v}.", f"price {cur_b} {v}."),
        ("unit_percent", f"费率为{p}%。", f"费率为{p}‰。"),
    ]


# --------------------------------------------------------------------------- edits

_MEASURE = "个种次位天年月行列章节步条项页倍字节比特秒"
_REAL_CN = re.compile(rf"(?:(?<=第)|(?<![\u4e00-\u9fff]))([一二两三四五六七八九])(?=[{_MEASURE}])")
_REAL_AR = re.compile(r"\d+")
_UNIT_FAMILIES = (("字节", "比特"), ("秒", "分钟"), ("kb", "mb"), ("%", "‰"), ("天", "年"))
_REAL_UNIT = re.compile(r"(?<=\d)(" + "|".join(u for fam in _UNIT_FAMILIES for u in fam)
                        + r")(?![a-z])")


def _far_from_numbers(text: str, start: int, end: int, margin: int = 2) -> bool:
    return not NUMERAL.search(text, max(0, start - margin), min(len(text), end + margin))


def changed_pairs(paragraphs: list[str], rng: random.Random, injected: bool,
                  ) -> list[tuple[str, str, str]]:
    """(category, a, b) changed-quantity pairs of these paragraphs."""
    out: list[tuple[str, str, str]] = []
    for para in paragraphs:
        arabic = list(_REAL_AR.finditer(para))
        if arabic:
            m = rng.choice(arabic)
            i = rng.randrange(m.start(), m.end())
            new = str(_other(rng, 0, 9, int(para[i])))
            out.append(("real_arabic", para, para[:i] + new + para[i + 1:]))
        chinese_ = list(_REAL_CN.finditer(para))
        if chinese_:
            m = rng.choice(chinese_)
            old = m.group(1)
            new = rng.choice([c for c in "二三四五六七八九" if c != old and not (old == "两" and c == "二")])
            out.append(("real_chinese", para, para[:m.start(1)] + new + para[m.end(1):]))
        units = list(_REAL_UNIT.finditer(para))
        if units:
            m = rng.choice(units)
            family = next(f for f in _UNIT_FAMILIES if m.group(1) in f)
            new = next(u for u in family if u != m.group(1))
            out.append(("real_unit", para, para[:m.start(1)] + new + para[m.end(1):]))
        if injected:
            cuts = [m.end() for m in re.finditer(r"[。.!?;；] ?", para)] or [len(para)]
            at = rng.choice(cuts)
            for category, a, b in injected_phrases(rng):
                out.append((category, para[:at] + a + para[at:], para[:at] + b + para[at:]))
    return out


def preserving_pairs(paragraphs: list[str], rng: random.Random, chinese_text: bool,
                     ) -> list[tuple[str, str, str]]:
    """(category, a, b) quantity-preserving edits of these paragraphs."""
    out = []
    for para in paragraphs:
        words = para.split(" ")
        plain = [i for i, w in enumerate(words)
                 if w and not NUMERAL.search(" ".join(words[max(0, i - 1):i + 2]))]
        if plain:
            i = rng.choice(plain)
            out.append(("word_delete", para, " ".join(words[:i] + words[i + 1:])))
        swappable = [i for i in plain if i + 1 < len(words) and i + 1 in set(plain)]
        if swappable:
            i = rng.choice(swappable)
            swapped = words[:i] + [words[i + 1], words[i]] + words[i + 2:]
            out.append(("word_swap", para, " ".join(swapped)))
        if not chinese_text:
            continue
        for word in ORDINARY_NUMERAL_WORDS:
            at = para.find(word)
            end = at + len(word)
            # the word may hold numerals; the two characters on each side may not
            if at >= 0 and not NUMERAL.search(para[max(0, at - 2):at].replace("第", "0")
                                              + para[end:end + 2]):
                out.append(("numeral_word_delete", para, para[:at] + para[end:]))
        gaps = [m.start() for m in re.finditer(" ", para) if _far_from_numbers(para, m.start(),
                                                                               m.start() + 1)]
        if gaps:
            at = rng.choice(gaps)
            word = rng.choice(ORDINARY_NUMERAL_WORDS)
            out.append(("numeral_word_insert", para, para[:at] + " " + word + para[at:]))
        free = [i for i, ch in enumerate(para) if ch != " " and _far_from_numbers(para, i, i + 1)]
        if len(free) >= 3:
            drop = set(rng.sample(free, 3))
            out.append(("char_delete", para, "".join(c for i, c in enumerate(para)
                                                     if i not in drop)))
    return out


# --------------------------------------------------------------------------- measurement


def near_only(pairs: list[tuple[str, str, str]], hasher: MinHasher, threshold: float,
              ) -> list[tuple[str, str, str]]:
    texts = sorted({t for _c, a, b in pairs for t in (a, b)})
    sets = dict(zip(texts, hasher.shingle_sets(texts), strict=True))
    return [(c, a, b) for c, a, b in pairs if exact_jaccard(sets[a], sets[b]) >= threshold]


def blocked_rates(pairs: list[tuple[str, str, str]], guards: dict[str, object]) -> dict:
    """Per category: pairs, and per guard the blocked count."""
    table: dict[str, Counter] = defaultdict(Counter)
    for category, a, b in pairs:
        table[category]["pairs"] += 1
        for name, guard in guards.items():
            sa, sb = guard.sequences(a), guard.sequences(b)  # type: ignore[attr-defined]
            table[category][name] += sa != sb
    return {c: dict(v) for c, v in sorted(table.items())}


def verify_cost(pairs: list[tuple[str, str, str]], guards: dict[str, object], rounds: int,
                ) -> dict[str, tuple[float, float]]:
    """Per guard (µs per pair, ns per character): sequences once per distinct text, then one
    comparison per pair, as the verify stage does; guards alternate, best round counts."""
    texts = sorted({t for _c, a, b in pairs for t in (a, b)})
    chars = sum(map(len, texts))
    best = dict.fromkeys(guards, float("inf"))
    for _ in range(rounds):
        for name, guard in guards.items():
            t = time.process_time()
            seqs = {text: guard.sequences(text) for text in texts}  # type: ignore[attr-defined]
            for _c, a, b in pairs:
                na, ua = seqs[a]
                nb, ub = seqs[b]
                _blocked = "numbers" if na != nb else ("units" if ua != ub else None)
            best[name] = min(best[name], time.process_time() - t)
    return {name: (b / len(pairs) * 1e6, b / chars * 1e9) for name, b in best.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", type=Path, help="write the figures here as well")
    args = parser.parse_args(argv)
    if not (ZH_MAN / "man1" / "ab.1.gz").exists():
        sys.exit("bench.guard: needs the Chinese man pages: apt-get install manpages-zh")
    config = NearDedupConfig()
    hasher = MinHasher(1, config.seed, config.shingle_size)
    rng = random.Random(args.seed)
    zh, en = zh_paragraphs(), sample_paragraphs()
    print(f"paragraphs: {len(zh)} Chinese (manpages-zh), {len(en)} English (samples)",
          file=sys.stderr)
    changed = near_only(changed_pairs(zh, rng, True) + changed_pairs(en, rng, True),
                        hasher, config.threshold)
    kept_zh = near_only(preserving_pairs(zh, rng, True), hasher, config.threshold)
    kept_en = near_only(preserving_pairs(en, rng, False), hasher, config.threshold)
    guards = {"nd-2": NdTwoGuard(), "nd-3": Guard()}
    figures: dict = {"paragraphs": {"zh": len(zh), "en": len(en)}, "seed": args.seed}
    for name, pairs in (("changed", changed), ("preserving_zh", kept_zh),
                        ("preserving_en", kept_en)):
        table = blocked_rates(pairs, guards)
        total: Counter[str] = Counter()
        for row in table.values():
            total.update(row)
        figures[name] = {"by_category": table, "total": dict(total)}
        print(f"\n{name}: {total['pairs']} near pairs")
        print(f"  {'category':24} {'pairs':>6} {'nd-2 blocked':>14} {'nd-3 blocked':>14}")
        for category, row in [*table.items(), ("all", dict(total))]:
            cells = [f"{row.get(g, 0):>5} {100 * row.get(g, 0) / row['pairs']:6.2f}%"
                     for g in guards]
            print(f"  {category:24} {row['pairs']:>6} {cells[0]:>14} {cells[1]:>14}")
    print("\nguard cost per verified pair (best of rounds, process time)")
    for name, pairs in (("zh", [p for p in changed if CJK.search(p[1])] + kept_zh),
                        ("en", [p for p in changed if not CJK.search(p[1])] + kept_en)):
        for guard_name, (us, ns) in verify_cost(pairs, guards, args.rounds).items():
            figures.setdefault("cost", {}).setdefault(name, {})[guard_name] = {
                "pairs": len(pairs), "us_per_pair": round(us, 2), "ns_per_char": round(ns, 1)}
            print(f"  {name} {guard_name}: {len(pairs)} pairs, {us:.2f} µs/pair, "
                  f"{ns:.1f} ns/char")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2, ensure_ascii=False) + "\n",
                             encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
