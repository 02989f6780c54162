"""The numeric/unit guard: Chinese numerals, units next to numbers only, on made-up and on real
text (the sample of the Chinese man pages of ``manpages-zh`` shipped in tests/data/zh), and
through the CLI."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import subprocess
import sys
from functools import lru_cache

import pytest
from helpers import REPO, make_package, run_cli
from zh_sample import zh_sample_text

from near_dedup_core import ALGORITHM_VERSION
from near_dedup_core import guard as guard_module
from near_dedup_core.config import NearDedupConfig
from near_dedup_core.guard import Guard, guard_for, main
from near_dedup_core.normalize import normalize
from near_dedup_core.signature import MinHasher, exact_jaccard

from bench import guard as bench_guard

GUARD = Guard()
CONFIG = NearDedupConfig()
HASHER = MinHasher(1, CONFIG.seed, CONFIG.shingle_size)


def read(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return GUARD.sequences(normalize(text))


def jaccard(a: str, b: str) -> float:
    sa, sb = HASHER.shingle_sets([normalize(a), normalize(b)])
    return exact_jaccard(sa, sb)


# --------------------------------------------------------------------------- what is read


@pytest.mark.parametrize("text, numbers, units", [
    ("三万元", ["30000"], ["元"]),
    ("两千五百", ["2500"], []),
    ("两千五", ["2500"], []),
    ("一万五千零三十", ["15030"], []),
    ("一百零五个", ["105"], []),
    ("二〇一九年十月一日", ["2019", "10", "1"], ["年", "月", "日"]),
    ("二零零八年", ["2008"], ["年"]),
    ("第三章", ["3"], []),
    ("第 12 行", ["12"], []),
    ("星期一", ["1"], []),
    ("百分之三", ["3"], ["%"]),
    ("百分之三十五点五", ["35.5"], ["%"]),
    ("千分之五", ["5"], ["‰"]),
    ("万分之二", ["2"], ["‱"]),
    ("三分之一", ["1/3"], []),
    ("3.5万", ["35000"], []),
    ("1亿2千万", ["120000000"], []),
    ("三点五万吨", ["35000"], ["吨"]),
    ("人民币叁佰元整", ["300"], ["人民币", "元"]),
    ("壹万贰仟", ["12000"], []),
    ("十多万元", ["10"], ["万元"]),
    ("三千万元", ["30000000"], ["元"]),
    ("５公斤", ["5"], ["公斤"]),           # NFKC: full-width digits are ASCII
    ("￥5", ["5"], ["¥"]),                 # NFKC keeps the yen sign as ¥
    ("usd 5", ["5"], ["usd"]),
    ("5 $ 6", ["5", "6"], ["$"]),
    ("百分之二 ¥5", ["2", "5"], ["%", "¥"]),
    ("5 kg", ["5"], ["kg"]),
    ("96mb内存", ["96"], ["mb"]),
    ("50%", ["50"], ["%"]),
    ("5千克", ["5"], ["千克"]),
    ("三五百", ["35百"], []),               # no well-formed numeral: spelled out
    ("128kbit/s", ["128"], []),
])
def test_chinese_and_arabic_quantities(text, numbers, units):
    assert read(text) == (tuple(numbers), tuple(units))


@pytest.mark.parametrize("word", [
    "统一", "一些", "一样", "万一", "千万", "一般", "一起", "唯一", "一直", "之一", "十分", "百姓",
    "千万别", "部分", "股份", "米饭", "一切", "同一个", "一部分", "乱七八糟", "大陆人", "零件",
    "十六进制", "百分比", "百分号", "四周", "一点", "万岁", "分析", "千克", "米", "%", "$",
])
def test_words_with_numeral_or_unit_characters_read_nothing(word):
    assert read(f"我们{word}处理这些数据") == ((), ())


def test_same_number_or_not():
    """三万, 3万 and 30000 are one number; 30,000 is not (Arabic numbers stay as written)."""
    assert read("三万")[0] == read("3万")[0] == read("30000")[0] == ("30000",)
    assert read("30,000")[0] == ("30,000",)
    assert GUARD.blocked_by(normalize("收入三万元"), normalize("收入30000元")) is None
    assert GUARD.blocked_by(normalize("收入三万元"), normalize("收入30,000元")) == "numbers"
    assert read("二〇一九年")[0] == read("2019年")[0]
    assert read("百分之三") == read("3%")


@pytest.mark.parametrize("a, b, blocked", [
    ("三万元", "五万元", "numbers"),
    ("二〇一九年", "二〇二〇年", "numbers"),
    ("百分之三", "百分之五", "numbers"),
    ("第三", "第四", "numbers"),
    ("三分之一", "四分之一", "numbers"),
    ("1亿2千万", "1亿3千万", "numbers"),
    ("5公斤", "5公里", "units"),
    ("3万元", "3万美元", "units"),
    ("usd 5", "eur 5", "units"),
    ("百分之三", "千分之三", "units"),
    ("这一部分百姓的股份", "这百姓的股份", None),
    ("统一处理数据", "处理数据", None),
])
def test_blocked_by(a, b, blocked):
    text = "这份报告说明了本期的情况:"
    assert GUARD.blocked_by(normalize(text + a), normalize(text + b)) == blocked


def test_parser_agrees_with_an_independent_numeral_writer():
    """Values 1 … 10^12 written by the benchmark's own writer (sections, 零, 两, capitals)."""
    rng = random.Random(7)
    values = list(range(1, 2200)) + [rng.randrange(1, 10**12) for _ in range(3000)]
    for n in values:
        for capitals in (False, True):
            text = bench_guard.chinese(n, rng, capitals)
            assert read(f"共{text}吨") == ((str(n),), ("吨",)), text


def test_extra_units_count_next_to_numbers_only():
    config = NearDedupConfig.model_validate({"extra_units": [{"tokens": ["bbl", "桶"]}]})
    guard = guard_for(config, frozenset())
    assert guard.sequences("产量 5桶 和 7 bbl") == (("5", "7"), ("桶", "bbl"))
    assert guard.sequences("这个水桶 bbl") == ((), ())


def test_ascii_reading_matches_at_the_digits_as_findall_would():
    """ASCII text is matched only where a digit stands (`guard._matches_at`): the same tuples,
    in the same order, as ``findall`` of the pattern over every position, on strings dense in
    digits, separators, signs, currency codes and unit letters."""
    rng = random.Random(11)
    alphabet = "0123456789.,$ %kgmsbx-usd eur  a1"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60)))
             for _ in range(20_000)]
    texts += ["usd 5 usd5 5usd $5 5$ 1,000.5kg 3.0 x 2x 10 % 7kgs 8 kb", "no digits at all"]
    for guard in (GUARD, Guard(frozenset({"pcs", "bbl"}))):
        pattern = guard._ascii
        for text in texts:
            assert list(guard_module._matches_at(
                pattern.match, text, guard_module._ascii_digits(text))) == pattern.findall(text)


# --------------------------------------------------------------------------- real text


@lru_cache(maxsize=1)
def man_paragraphs() -> tuple[str, ...]:
    return tuple(bench_guard.zh_paragraphs(texts=[zh_sample_text()]))


def test_real_text_edits():
    """On real Chinese text: every changed quantity is seen, and edits that change no
    quantity (ordinary words deleted or swapped, numeral-bearing words such as 统一 or 部分
    deleted or inserted, characters deleted away from numbers) leave the reading alone."""
    paragraphs = man_paragraphs()
    assert len(paragraphs) >= 100
    rng = random.Random(3)
    changed = bench_guard.changed_pairs(paragraphs, rng, injected=False)
    assert len(changed) >= 80
    missed = [(c, a, b) for c, a, b in changed if GUARD.sequences(a) == GUARD.sequences(b)
              and c != "real_unit"]
    assert missed == []
    kept = bench_guard.preserving_pairs(paragraphs, rng, chinese_text=True)
    assert len(kept) >= 450
    blocked = [(c, a, b) for c, a, b in kept if GUARD.sequences(a) != GUARD.sequences(b)]
    assert len(blocked) <= len(kept) * 0.002, blocked[:3]


def test_scan_keeps_changed_chinese_amounts_apart(tmp_path):
    """Through the CLI, in one pool: 三万元 → 五万元 is blocked by numbers; an ordinary word
    deleted far from any number is a plain near duplicate. An nd-2 index is refused."""
    base = next(p for p in man_paragraphs()
                if 300 <= len(p) <= 600 and GUARD.sequences(p) == ((), ()) and " " in p)
    cut = base.index(" ", len(base) // 2)
    amount = "本项目预算为三万元。"
    a = base[:cut] + amount + base[cut:]
    b = a.replace("三万元", "五万元")
    words = a.split(" ")
    i = next(k for k in range(1, len(words) - 1)
             if words[k] and not bench_guard.NUMERAL.search(" ".join(words[k - 1:k + 2])))
    d = " ".join(words[:i] + words[i + 1:])
    assert jaccard(a, b) >= 0.9 and jaccard(a, d) >= 0.9 and len(d) >= 80
    records = [{"id": sid, "text": text, "domain": "man",
                "source": {"dataset": "manpages-zh", "row": sid}}
               for sid, text in (("a", a), ("b", b), ("d", d))]
    pkg = make_package(tmp_path, "zh-v1", {"train": records})
    idx = tmp_path / "zh.sqlite"
    code, _out, err = run_cli("--quiet", "--index", idx, "index", "--inputs", pkg)
    assert code == 0, err
    code, _out, err = run_cli("--quiet", "--index", idx, "scan", "--inputs", pkg,
                              "--output", tmp_path / "report")
    assert code == 0, err
    lines = (tmp_path / "report" / "decisions.jsonl").read_text(encoding="utf-8").splitlines()
    decisions = {d["sample_id"]: (d["decision"], d["reason"]) for d in map(json.loads, lines)}
    # a and b are decided in content order: the first is unique, the other blocked by it
    first, second = ("a", "b") if decisions["a"] == ("keep", "unique") else ("b", "a")
    assert decisions == {first: ("keep", "unique"), second: ("keep", "guard_blocked"),
                         "d": ("exclude", "near_duplicate")}
    lines = (tmp_path / "report" / "relations.jsonl").read_text(encoding="utf-8").splitlines()
    relations = {(r["sample"]["sample_id"], r["match"]["sample_id"]): r["blocked_by"]
                 for r in map(json.loads, lines)}
    assert relations[(second, first)] == "numbers" and relations[("d", "a")] is None

    con = sqlite3.connect(idx)
    con.execute("UPDATE meta SET value = 'nd-2' WHERE key = 'algorithm_version'")
    con.commit()
    con.close()
    code, out, err = run_cli("--quiet", "--index", idx, "index", "--inputs", pkg)
    assert code == 1 and out == ""
    assert err == (f"near-dedup: error: index {idx}: built with algorithm nd-2, this tool "
                   f"runs {ALGORITHM_VERSION}; use a new index path\n")


# --------------------------------------------------------------------------- entry point


def test_debug_entry_point(capsys):
    assert main(["收入三万元, 增长百分之三", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "normalized": "收入三万元, 增长百分之三", "numbers": ["30000", "3"],
        "units": ["元", "%"]}
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "near_dedup_core.guard", "第二〇一九号 5 kg"],
                          capture_output=True, text=True, env=env, timeout=60, check=True)
    assert done.stdout.splitlines() == ["normalized: 第二〇一九号 5 kg",
                                        "numbers:    2019 5", "units:      kg"]
