"""The numeric/unit guard: texts whose number sequences or unit sequences differ never merge.

Both sequences are read from the normalized text (NFKC, casefold, whitespace collapsed; NFKC
already maps full-width digits, ``％`` and ``￥`` to ``0-9``, ``%`` and ``¥``), in order of
appearance. ``python -m near_dedup_core.guard TEXT`` prints what the guard reads.

Numbers
-------
- Arabic numbers: runs of digits with inner ``.`` or ``,`` separators, kept **as written**
  (``1,000`` and ``1000``, ``3.0`` and ``3`` differ: the guard errs towards keeping samples
  apart). Every Arabic number counts, wherever it stands.
- Chinese numerals (〇零一二两三四五六七八九十百千万亿, the capitals 壹贰叁肆伍陆柒捌玖拾佰仟 and the
  traditional 兩萬億貳參陸) are read as their **value**, written in plain Arabic digits:
  三万 → ``30000``, 两千五 → ``2500``, 三点五 → ``3.5``. Mixed forms take the same road:
  3.5万 → ``35000``, 1亿2千万 → ``120000000``. So 三万, 3万 and 30000 are the same number, but
  30,000 is not (an Arabic number stays as written). Runs of bare digit characters are codes or
  years read digit by digit: 二〇一九 → ``2019``. A run that is no well-formed numeral (三五百)
  is spelled out character by character (``35百``), which keeps it apart from any value.
- A Chinese numeral counts only where it is a quantity: after 第/星期/礼拜 (ordinals, weekdays),
  in a fraction N分之M (three-quarters: ``3/4``; 百分之/千分之/万分之 give the number with the
  unit ``%``/``‰``/``‱``, so 百分之三 reads like ``3%``), followed by a measure word or unit
  (三个, 二〇一九年, 五公斤, 十多人), or as a run of two or more numeral characters. A single
  numeral character on its own (一 in 统一, 三 in 再三) is no quantity, and a short list of
  words that contain numerals but are not quantities is skipped (万一, 千万 "by all means",
  一一, 十分 "very", 一点 "a little", 四周 "around", 一部分 …).
- A number's sign is not read (``-5`` and ``5`` are both ``5``).

Units
-----
Unit tokens count **only when attached to a number**, Arabic or Chinese: after it (CJK units
directly or after 多/余: ``3万元``, ``5公斤``, ``十多万元``; signs and word units also after one
space: ``50%``, ``5 kg``), or before it for currency signs and codes (``¥5``, ``$ 5``,
``usd 5``, ``人民币5``). Several CJK unit tokens in a row are one token (万元, 千瓦时). Words
that start with a unit character are no unit (两元素, 一个分区: ``NOT_UNITS``). Measure words
(个, 位, 次, 种, 条 …) make a Chinese numeral a number but are not units. Extra unit tokens come
from the config (``extra_units``), globally or per domain, and are read after a number.

Cost: one compiled regular expression reads every number with its units (the lexicon, the
contexts and the units are look-arounds and alternatives of it, so a lone 一 never reaches
Python), ``findall`` hands over plain tuples, and the value of a Chinese numeral comes from a
cache. Pure-ASCII text takes a smaller expression without the Chinese alternatives, tried only
where numpy finds a digit (``findall`` would test every position in Python's regex engine).
Building a guard compiles both (about 0.2 s; ``guard_for`` caches one per set of extra units).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Protocol

import numpy as np

#: Digit characters and their values (〇/零 are zero; 两 and the capitals are digits too).
DIGITS = {"〇": 0, "零": 0, "一": 1, "二": 2, "两": 2, "兩": 2, "三": 3, "四": 4, "五": 5,
          "六": 6, "七": 7, "八": 8, "九": 9, "壹": 1, "贰": 2, "貳": 2, "叁": 3, "參": 3,
          "肆": 4, "伍": 5, "陆": 6, "陸": 6, "柒": 7, "捌": 8, "玖": 9}
#: Magnitudes inside a section (below 万) and section magnitudes.
SMALL = {"十": 10, "拾": 10, "百": 100, "佰": 100, "千": 1000, "仟": 1000}
BIG = {"万": 10**4, "萬": 10**4, "亿": 10**8, "億": 10**8}
#: Digit characters that form digit-by-digit codes and years (二〇一九).
CODE_DIGITS = "〇零一二三四五六七八九"

#: Unit tokens that may follow a number, Arabic or Chinese (symbols and CJK units).
SYMBOL_UNITS = (
    "%", "‰", "‱", "°c", "°f", "°", "$", "¥", "€", "£", "₩", "₹",
    "元", "角", "分", "块", "美元", "港元", "港币", "欧元", "日元", "英镑", "韩元", "卢布", "美金",
    "人民币", "万", "亿", "兆", "吨", "公吨", "斤", "公斤", "千克", "克", "毫克", "微克", "磅",
    "盎司", "公里", "千米", "米", "厘米", "毫米", "微米", "纳米", "英里", "英尺", "英寸", "海里",
    "平方米", "平米", "平方公里", "平方千米", "立方米", "公顷", "亩", "升", "毫升", "加仑", "度",
    "摄氏度", "华氏度", "瓦", "千瓦", "兆瓦", "千瓦时", "伏", "毫安", "赫兹", "千赫", "兆赫",
    "字节", "千字节", "兆字节", "比特", "股", "倍", "成", "折", "百分点", "年", "月", "日", "天",
    "周", "小时", "钟头", "分钟", "秒", "毫秒", "微秒", "纳秒", "世纪", "季度", "岁",
    "周岁")
WORD_UNITS = ("kg", "g", "mg", "lb", "oz", "km", "m", "cm", "mm", "nm", "mi", "ft",
              "ms", "ns", "s", "sec", "min", "h", "hr", "hrs", "kb", "mb", "gb", "tb",
              "kib", "mib", "gib", "tib", "hz", "khz", "mhz", "ghz", "w", "kw", "mw", "kwh",
              "v", "mv", "kv", "ma", "l", "ml", "usd", "cny", "rmb", "eur", "gbp", "jpy",
              "hkd", "bp", "bps", "pp", "x")
#: Units that also count when they precede the number (¥5, usd 5, 人民币5).
PREFIX_UNITS = ("usd", "cny", "rmb", "eur", "gbp", "jpy", "hkd")
PREFIX_SYMBOLS = ("$", "¥", "€", "£", "₩", "₹", "人民币", "美元", "港币")
#: Measure words: after a Chinese numeral they make it a quantity, but are not units.
MEASURE_WORDS = (
    "个", "位", "名", "次", "种", "条", "项", "家", "份", "台", "件", "只", "张", "本", "篇",
    "章", "节", "行", "列", "段", "句", "字", "页", "层", "级", "组", "对", "双", "套", "批",
    "把", "支", "根", "片", "部", "座", "辆", "架", "艘", "所", "间", "栋", "户", "口", "匹",
    "颗", "粒", "枚", "道", "步", "场", "届", "期", "号", "款", "类", "点", "遍", "回", "轮",
    "代", "版", "卷", "集", "人", "幅", "笔", "例", "门", "首", "局", "时", "码", "多", "余")
#: Words that contain numeral characters but are not quantities. Those that start with a
#: numeral are skipped as a whole (they win over a quantity reading that starts at the same
#: place); in the others no numeral run may start after the leading characters (统一个 has no 1).
LEXICON = (
    "万一", "万万", "万千", "千千万万", "一一", "三三两两", "七七八八", "乱七八糟", "一五一十",
    "十之八九", "略知一二", "统一", "唯一", "同一", "之一", "单一", "划一", "专一", "均一",
    "归一", "不一", "一些", "一点点", "一下子", "一次性", "一部分", "一口气", "一块儿", "一度",
    "一时", "一道", "一成不变", "一分为二", "一会儿", "三角", "四周", "万岁", "百折不挠", "有朝一日",
    "一来", "非零", "十六进", "零件", "零部件", "二元", "三元组", "一元运算", "三元运算", "百分号", "百分数", "十字", "千位",
    "登陆", "着陆", "大陆", "陆地", "陆军", "陆续", "收拾", "拾取", "队伍", "落伍", "入伍", "放肆",
    "肆意")
#: Unit words that start with a magnitude character: 千克 is a unit, not 1000 克.
_MAG_UNITS = ("千克", "千米", "千瓦", "千字节", "千赫", "千卡", "百分点", "百分比")


def _alt(tokens: Iterable[str]) -> str:
    """One regex alternation of literal tokens as a prefix tree (公(?:斤|里)…), longest match
    first: each branch starts with a distinct character, which the regex engine rejects fast."""
    tree: dict = {}
    for token in tokens:
        node = tree
        for ch in token:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict) -> str:
        alts = [re.escape(ch) + emit(node[ch]) for ch in sorted(node) if ch]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 and len(alts[0]) == 1 else f"(?:{'|'.join(alts)})"
        return body + ("?" if "" in node else "")

    firsts = sorted(ch for ch in tree if ch)
    if len(firsts) <= 4:
        return emit(tree)
    # The engine tries a branch's alternatives one by one; a character class rejects at once.
    return f"(?=[{''.join(re.escape(ch) for ch in firsts)}]){emit(tree)}"


_AR = r"\d+(?:[.,]\d+)*"


def _ranges(chars: str) -> str:
    """A character-class body of these characters as ranges (a-z…)."""
    codes, out, i = sorted(set(map(ord, chars))), [], 0
    while i < len(codes):
        j = i
        while j + 1 < len(codes) and codes[j + 1] == codes[j] + 1:
            j += 1
        out.append(re.escape(chr(codes[i])) + (f"-{re.escape(chr(codes[j]))}" if j > i else ""))
        i = j + 1
    return "".join(out)


#: The decimal digits of the Basic Multilingual Plane (what ``\d`` matches there) as ranges:
#: the regex engine tests a class of BMP ranges with a bitmap, ``\d`` with a Unicode lookup
#: per character. Digits of the supplementary planes (historic scripts, Adlam …) start no
#: number in non-ASCII text; NFKC already maps the mathematical digits there to 0-9.
_BMP_DIGITS = _ranges("".join(re.findall(r"\d", "".join(map(chr, range(0x10000))))))
#: A letter of an alphabet: a word unit must not run into one (5 kg, not 5 kgs or 5 kbit);
#: CJK characters do not count (96mb内存).
_LETTER = r"[^\W\d_\u3000-\u9fff\uac00-\ud7af\uf900-\ufaff]"
_NOT_UNIT = rf"(?!{_alt(_MAG_UNITS)})"
_CC = rf"{_NOT_UNIT}[{''.join(DIGITS)}{''.join(SMALL)}{''.join(BIG)}]"
_DD = f"[{''.join(DIGITS)}]"
_MAG = rf"{_NOT_UNIT}[{''.join(SMALL)}{''.join(BIG)}]"
_CN = rf"{_CC}+(?:点{_DD}+[{''.join(BIG)}]?)?"                 # 两千五百, 三点五万
_MIXED = rf"{_AR}(?:{_MAG}+(?:{_AR}|{_CN})?)*"                   # 3.5万, 1亿2千万, 2019
_NUMERALS = "".join(DIGITS) + "".join(SMALL) + "".join(BIG)
# Lexicon words that start with a numeral, and conditional ones: 千万 before a unit is ten
# million, 十分钟 ten minutes, 一点钟 one o'clock, 百分之 a percentage (百分 alone is not).
_LEX = (_alt(w for w in LEXICON if w[0] in _NUMERALS)
        + r"|千万(?! ?(?:{u}))|十分(?!钟|之)|一点(?!钟|半|\d)|[百千万]分(?!之)")


def _cn_start(lex: str) -> str:
    """Where a Chinese numeral run may start: not inside another run, not at a lexicon word,
    not after the leading characters of one (统|一)."""
    behind: dict[tuple[int, str], set[str]] = {}
    for w in LEXICON:
        i = next(k for k, c in enumerate(w) if c in _NUMERALS)
        if i:
            behind.setdefault((i, w[i]), set()).add(w[:i])
    inside = "|".join(f"{re.escape(ch)}(?<={_alt(prefixes)}.)"
                      for (_, ch), prefixes in sorted(behind.items()))
    return rf"{_CN_AFTER}(?!{lex}|{inside})"


# Places where a number was read already: after 第, 星期 or 礼拜 (ordinals), after 分之
# (fractions), inside a numeral run or a decimal (三点|五), and, for Arabic digits, after a
# digit and one or two magnitudes (1亿2千万). Look-behinds of one width are one alternation.
_MAGS = "".join(SMALL) + "".join(BIG)
_AR_START = (rf"(?<![\d第之])(?<!\d[.,]|第 |星期|礼拜|\d[{_MAGS}])(?<!\d[{_MAGS}][{_MAGS}])")
_CN_AFTER = rf"(?<![\d{_NUMERALS}第之])(?<!第 |星期|礼拜|[{_NUMERALS}]点)"
#: Words that start with a unit character but are not units after a number (两元素, 一个分区).
NOT_UNITS = ("元素", "分隔", "分区", "分片", "分类", "分别", "分支", "分布", "分配", "分析",
             "分组", "分割", "分号", "分量", "成员", "成功", "成分", "成份", "成为", "成立",
             "日历", "日志", "日期", "日常", "度量", "天文", "天然", "升音", "升级", "升序",
             "美元符", "倍数", "股票", "周期", "周围", "月份", "年龄", "年份", "秒表")
# A CJK unit follows the number directly (or after 多/余); a sign or a word unit may follow a
# space. Several unit tokens in a row are one (万元, 千瓦时).
_AFTER = (r"(?=[{first}])(?:[多余]?(?P<unit>(?!{not_units})(?:{cjk})+)"
          r"| ?(?P<unit_s>(?:{sym})+|(?:{words})(?!{letter})))")


@lru_cache(maxsize=8192)
def _value(span: str) -> str:
    """Canonical string of a numeral span that is not a plain Arabic number.

    Bare digit characters read digit by digit (二〇一九 → 2019). Otherwise the span is a
    positional numeral: sections below 万 add digit × 十/百/千 (magnitudes falling), 万 and
    亿 multiply what precedes them, 点 starts decimal digits, and a digit right after a
    magnitude stands for the next lower one (两千五 = 2500, 一万五 = 15000, 1万5 = 15000).
    The value is exact (Decimal) and written in plain digits. A span that breaks these rules
    is spelled out character by character (digits as digits, magnitudes as 十百千万亿).
    """
    if all(c in CODE_DIGITS for c in span):
        return "".join(str(DIGITS[c]) for c in span)
    try:
        return _positional(span)
    except (ValueError, InvalidOperation):
        return "".join(str(DIGITS[c]) if c in DIGITS else
                       "十百千万亿"["十百千万亿".index(c)] if c in "十百千万亿" else
                       {"拾": "十", "佰": "百", "仟": "千", "萬": "万", "億": "亿", "点": "."}.get(c, c)
                       for c in span)


_PIECE = re.compile(rf"({_AR})|(点{_DD}+)|(.)")


def _positional(span: str) -> str:
    big = mid = small = Decimal(0)
    digit: Decimal | None = None
    small_last = 0
    mid_set = big_set = False
    last_mag = 0      # magnitude of the previous piece (0 after a digit or 零)
    digit_mag = 0     # magnitude right before the pending digit
    for m in _PIECE.finditer(span):
        ar, dec, ch = m.groups()
        if dec is not None:
            if digit is None:
                raise ValueError("decimal point without a digit")
            digit += Decimal("0." + "".join(str(DIGITS[c]) for c in dec[1:]))
            last_mag = 0
        elif ar is not None or ch in DIGITS:
            if digit is not None:
                raise ValueError("two digits in a row")
            if ar is None and DIGITS[ch] == 0:
                last_mag = 0          # 一百零五: the 五 is units
                continue
            digit = Decimal(ar.replace(",", "")) if ar is not None else Decimal(DIGITS[ch])
            digit_mag, last_mag = last_mag, 0
        elif ch in SMALL:
            mag = SMALL[ch]
            if small_last and mag >= small_last:
                raise ValueError("magnitudes must fall")
            small += (digit if digit is not None else 1) * mag
            small_last, digit, last_mag = mag, None, mag
        elif ch in BIG:
            part = small + (digit if digit is not None else 0)
            if ch in "万萬":
                if mid_set:
                    raise ValueError("万 twice")
                mid, mid_set, last_mag = (part or Decimal(1)) * 10**4, True, 10**4
            else:
                if big_set:
                    raise ValueError("亿 twice")
                big = (mid + part or Decimal(1)) * 10**8
                mid, mid_set, big_set, last_mag = Decimal(0), False, True, 10**8
            small, small_last, digit = Decimal(0), 0, None
        else:
            raise ValueError(f"unexpected {ch!r}")
    total = big + mid + small
    if digit is not None:
        total += digit * digit_mag / 10 if digit_mag > 10 else digit
    if total == total.to_integral_value():
        return str(int(total))
    return format(total.normalize(), "f")


def _fraction(denominator: str, numerator: str) -> tuple[str, str | None]:
    """N分之M: the number M/N, or M with a percent-like unit for 百/千/万分之."""
    unit = {"百": "%", "千": "‰", "万": "‱", "萬": "‱", "佰": "%", "仟": "‰"}.get(denominator)
    if unit is not None:
        return _read(numerator), unit
    return f"{_read(numerator)}/{_read(denominator)}", None


class Guard:
    """Extracts (numbers, units) of a normalized text for one set of unit tokens."""

    def __init__(self, extra: frozenset[str] = frozenset()) -> None:
        extra_words = {t for t in extra if t.isascii() and t.isalpha()}
        symbols = set(SYMBOL_UNITS) | (set(extra) - extra_words)
        words = set(WORD_UNITS) | extra_words
        cjk = {t for t in symbols if not t.isascii() and t.isalpha()}
        signs = symbols - cjk
        # (the look-ahead class of every first character rejects most numbers at once)
        starts = "".join(sorted({re.escape(t[0]) for t in symbols | words} | {"多", "余", " "}))
        after = _AFTER.format(first=starts, not_units=_alt(NOT_UNITS), cjk=_alt(cjk),
                              sym=_alt(signs), words=_alt(words), letter=_LETTER)
        licence = (rf"(?:(?!{_alt(NOT_UNITS)}){_alt(set(MEASURE_WORDS) | cjk | {'分之'})}"
                   rf"| ?{_alt(signs)})")
        cn_start = _cn_start(_LEX.format(u=_alt(set(MEASURE_WORDS) | symbols)))
        number = (rf"(?:(?=\d){_AR_START}{_MIXED}|(?=[{_NUMERALS}]){cn_start}"
                  rf"(?:(?={_CC}(?:{_CC}|点{_DD})){_CN}|(?![{''.join(BIG)}](?!分之)){_CN}(?={licence})))")
        # A currency sign or code right before the number, each form a fixed-width look-behind
        # (a sign right after another number belongs to that one: 5 $ 6, 二 ¥ 5).
        by_width: dict[int, set[str]] = {}
        for token in PREFIX_SYMBOLS + PREFIX_UNITS:
            by_width.setdefault(len(token), set()).add(token)
        ends = "".join(sorted({re.escape(t[-1]) for t in PREFIX_SYMBOLS + PREFIX_UNITS}))
        prefix = f"(?:(?<=[{ends}])|(?<=[{ends}] ))(?:" + "|".join(
            rf"(?<=(?<![\d{_NUMERALS}])(?<![\d{_NUMERALS}] )(?<!{_LETTER})"
            rf"(?P<cur{width}{gap}>{_alt(tokens)}){' ' * gap})"
            for width, tokens in sorted(by_width.items()) for gap in (0, 1)) + ")"
        # Every candidate starts with one of these characters. The scan consumes that one
        # character and reads the candidate in a look-ahead from it (group ``all``), so that
        # the regex engine skips every other character at C speed: a pattern that starts with
        # a group makes it try every position. The rest of an Arabic digit run is consumed as
        # well, so that its inner digits are no candidates; the look-behinds of the number
        # starts keep every other candidate out of a number read already.
        first = rf"[{_BMP_DIGITS}{_NUMERALS}第星礼]"
        body = (rf"(?:{prefix})?(?:(?P<pre>第|星期|礼拜) ?(?P<ord>{_MIXED}|{_CN})"
                rf"|(?P<num>{number})(?:分之(?P<frac>{_MIXED}|{_CN}))?)(?:{after})?")
        self._scan = re.compile(rf"{first}(?<=(?=(?P<all>{body})).)"
                                r"(?:(?<=\d)\d*(?:[.,]\d+)*)?")
        # ``re.ASCII``: on ASCII text \d and \W match what they match without it, and the
        # engine tests them without Unicode lookups (about a sixth less time)
        self._ascii = re.compile(rf"\d(?<=(?=(?P<all>(?:{prefix})?(?P<num>{_AR})(?:{after})?)).)"
                                 r"\d*(?:[.,]\d+)*", re.ASCII)
        names = sorted(self._scan.groupindex, key=self._scan.groupindex.__getitem__)
        self._prefixes = [i for i, name in enumerate(names) if name.startswith("cur")]
        assert names[self._prefixes[-1] + 1:] == ["pre", "ord", "num", "frac", "unit", "unit_s"]
        ascii_names = sorted(self._ascii.groupindex, key=self._ascii.groupindex.__getitem__)
        assert ascii_names[len(self._prefixes) + 1:] == ["num", "unit", "unit_s"]

    def sequences(self, text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(numbers, units) of the normalized ``text``, each in order of appearance."""
        numbers: list[str] = []
        units: list[str] = []
        number, unit = numbers.append, units.append
        k = len(self._prefixes)
        if text.isascii():
            for groups in _matches_at(self._ascii.match, text, _ascii_digits(text)):
                cur = "".join(groups[1:k + 1])      # at most one prefix group matched
                if cur:
                    unit(cur)
                num, after, sign = groups[k + 1:]
                number(num)
                if after or sign:
                    unit(after or sign)
            return tuple(numbers), tuple(units)
        read = _read
        for groups in self._scan.findall(text):
            cur = "".join(groups[1:k + 1])
            if cur:
                unit(cur)
            _pre, ordinal, num, frac, after, sign = groups[k + 1:]
            if not num:
                number(read(ordinal))
            elif not frac:
                number(read(num))
            else:
                value, percent = _fraction(num, frac)
                if percent is not None:
                    unit(percent)
                number(value)
            if after or sign:
                unit(after or sign)
        return tuple(numbers), tuple(units)

    def blocked_by(self, text_a: str, text_b: str) -> str | None:
        """"numbers", "units" or None (the pair may merge)."""
        return compare(self.sequences(text_a), self.sequences(text_b))

    def tokens(self, text: str) -> list[tuple[int, int, tuple[str, ...], tuple[str, ...]]]:
        """Where `sequences` reads each number of the normalized ``text``: (start, end,
        numbers, units) per match, in order, covering a currency prefix, the number and the
        unit after it; the concatenated numbers and units are exactly `sequences` (for
        showing the numbers in a text; `sequences` stays the fast path)."""
        k = len(self._prefixes)
        out: list[tuple[int, int, tuple[str, ...], tuple[str, ...]]] = []
        if text.isascii():
            end = 0
            for start in _ascii_digits(text):
                if start < end:
                    continue
                m = self._ascii.match(text, start)
                if m is None:
                    continue
                end = m.end()
                groups = m.groups("")
                cur = "".join(groups[1:k + 1])
                num, after, sign = groups[k + 1:]
                units = ((cur,) if cur else ()) + ((after or sign,) if after or sign else ())
                out.append((self._span_start(m, k), m.end("all"), (num,), units))
            return out
        for m in self._scan.finditer(text):
            groups = m.groups("")
            cur = "".join(groups[1:k + 1])
            _pre, ordinal, num, frac, after, sign = groups[k + 1:]
            units_l = [cur] if cur else []
            if not num:
                value = _read(ordinal)
            elif not frac:
                value = _read(num)
            else:
                value, percent = _fraction(num, frac)
                if percent is not None:
                    units_l.append(percent)
            if after or sign:
                units_l.append(after or sign)
            out.append((self._span_start(m, k), m.end("all"), (value,), tuple(units_l)))
        return out

    @staticmethod
    def _span_start(m: re.Match, k: int) -> int:
        starts = [m.start("all")] + [m.start(i) for i in range(2, k + 2) if m.start(i) >= 0]
        return min(starts)


def _ascii_digits(text: str) -> list[int]:
    """Positions of the digits 0-9 in the ASCII ``text``."""
    codes = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    return np.flatnonzero((codes - np.uint8(48)) < 10).tolist()


def _matches_at(match: Callable, text: str, starts: list[int]) -> Iterator[tuple[str, ...]]:
    """What ``findall`` of the pattern of ``match`` returns on ``text``, for a pattern whose
    matches begin only at ``starts`` (ascending) and are never empty: left to right, each
    match from the first start at or after the end of the previous one where the pattern
    matches. (Look-behinds still see the text before a start.) On ASCII text, finding the
    digits with numpy and matching there takes about 0.6× the time of ``findall``,
    which tests the pattern's first character at every position."""
    end = 0
    for start in starts:
        if start < end:
            continue
        found = match(text, start)
        if found is not None:
            end = found.end()
            yield found.groups("")


Sequences = tuple[tuple[str, ...], tuple[str, ...]]


def compare(a: Sequences, b: Sequences) -> str | None:
    """The guard's rule on two texts' (numbers, units): "numbers" when the number sequences
    differ, else "units" when the unit sequences differ, else None (the pair may merge)."""
    if a[0] != b[0]:
        return "numbers"
    if a[1] != b[1]:
        return "units"
    return None


_PLAIN = re.compile(_AR)


@lru_cache(maxsize=8192)
def _read(span: str) -> str:
    """Canonical form of one numeral span: an Arabic number as written, else its value."""
    if _PLAIN.fullmatch(span):
        return span
    return _value(span)


@lru_cache(maxsize=256)
def _guard(extra: frozenset[str]) -> Guard:
    return Guard(extra)


class _UnitRule(Protocol):
    @property
    def tokens(self) -> Sequence[str]: ...

    @property
    def domains(self) -> Sequence[str]: ...


class _HasUnits(Protocol):
    @property
    def extra_units(self) -> Sequence[_UnitRule]: ...


def guard_for(config: _HasUnits, domains: frozenset[str]) -> Guard:
    """The guard for a pair whose samples carry these domains: built-in units plus every
    configured extra that is global or names one of the domains. ``config`` is the config or
    a worker's `params.WorkerParams`."""
    extra: set[str] = set()
    for rule in config.extra_units:
        if not rule.domains or domains.intersection(rule.domains):
            extra.update(t.casefold() for t in rule.tokens)
    return _guard(frozenset(extra))


def main(argv: list[str] | None = None) -> int:
    """``python -m near_dedup_core.guard TEXT...``: what the guard reads in each text."""
    from near_dedup_core.normalize import normalize

    parser = argparse.ArgumentParser(allow_abbrev=False, 
        prog="python -m near_dedup_core.guard",
        description="Print the number and unit sequences the numeric/unit guard reads in the "
                    "normalized TEXT (built-in units; '-' reads the text from stdin).")
    parser.add_argument("text", nargs="+", metavar="TEXT")
    parser.add_argument("--json", action="store_true", help="one JSON object per TEXT")
    args = parser.parse_args(argv)
    guard = Guard()
    for raw in args.text:
        norm = normalize(sys.stdin.read() if raw == "-" else raw)
        numbers, units = guard.sequences(norm)
        if args.json:
            print(json.dumps({"normalized": norm, "numbers": list(numbers),
                              "units": list(units)}, ensure_ascii=False))
        else:
            print(f"normalized: {norm}")
            print(f"numbers:    {' '.join(numbers) if numbers else '(none)'}")
            print(f"units:      {' '.join(units) if units else '(none)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
