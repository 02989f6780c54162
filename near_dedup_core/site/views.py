"""Small pure helpers that turn report data into what the templates draw: bar-chart geometry,
diff segments, guard highlights, page numbers. No I/O."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from difflib import SequenceMatcher

from near_dedup_core.audit.textdiff import Span, merge_close

#: Unchanged text longer than twice this is shown as its two ends around a gap marker.
CONTEXT = 240
#: Context characters around a changed span in the search page's one-line diff.
LINE_CONTEXT = 20
#: Changed spans listed per sample in the search data (as `report explain` prints them).
MAX_SPANS = 20


def shard_of(package_id: str, sample_id: str, shards: int) -> int:
    """The search-data shard of a sample: CRC-32 of ``package_id + "\\n" + sample_id`` (UTF-8)
    modulo the number of shards; ``static/search.js`` computes the same."""
    return zlib.crc32(f"{package_id}\n{sample_id}".encode()) % shards


def anchor(key: tuple[str, str]) -> str:
    """An HTML id for a sample (ids may hold any character)."""
    return "s-%08x" % zlib.crc32((key[0] + "\n" + key[1]).encode())


def fmt_rate(value: float) -> str:
    return f"{100 * value:.1f}%"


def bar_chart(rows: Sequence[tuple[str, int, int]], label_width: int = 190,
              bar_width: int = 460, row_height: int = 22) -> dict:
    """Geometry of a horizontal stacked bar chart (kept, excluded) per row; coordinates are
    formatted strings so that the same data gives the same bytes."""
    peak = max((k + e for _, k, e in rows), default=0) or 1
    items = []
    for i, (label, kept, excluded) in enumerate(rows):
        wk = bar_width * kept / peak
        we = bar_width * excluded / peak
        items.append({"label": label if len(label) <= 28 else label[:27] + "…",
                      "full": label, "y": f"{i * row_height + 4}",
                      "ty": f"{i * row_height + 17}",
                      "kx": f"{label_width}", "kw": f"{wk:.1f}",
                      "ex": f"{label_width + wk:.1f}", "ew": f"{we:.1f}",
                      "vx": f"{label_width + wk + we + 6:.1f}",
                      "kept": kept, "excluded": excluded,
                      "value": (f"{kept:,} / {excluded:,}" if kept and excluded
                                else f"{kept + excluded:,}")})
    return {"items": items, "width": label_width + bar_width + 120,
            "height": len(rows) * row_height + 8}


def histogram_chart(values: Sequence[float], threshold: float, step: float = 0.01,
                    width: int = 640, height: int = 180) -> dict:
    """Bins of ``step`` from a little below the threshold to 1.0 (the last bin holds 1.0),
    with the threshold's x position for its marker line."""
    lo = max(0.0, round(int(threshold / step) * step - 3 * step, 10))
    n = max(1, round((1.0 - lo) / step))
    counts = [0] * n
    below = 0
    for v in values:
        if v < lo:
            below += 1
            continue
        counts[min(int(round((v - lo) / step, 9)), n - 1)] += 1
    peak = max(counts) or 1
    left, bottom, plot_h = 44, height - 28, height - 44
    bw = (width - left - 30) / n
    bars = []
    for i, c in enumerate(counts):
        h = plot_h * c / peak
        bars.append({"x": f"{left + i * bw:.1f}", "w": f"{max(bw - 1, 1):.1f}",
                     "y": f"{bottom - h:.1f}", "h": f"{h:.1f}", "count": c,
                     "label": f"{lo + i * step:.2f}–{lo + (i + 1) * step:.2f}"})
    tx = left + (threshold - lo) / step * bw
    ticks = [{"x": f"{left + i * bw:.1f}", "label": f"{lo + i * step:.2f}"}
             for i in range(0, n + 1, max(1, n // 8))]
    return {"bars": bars, "width": width, "height": height, "bottom": f"{bottom}",
            "left": f"{left}", "right": f"{width - 30}", "top": f"{bottom - plot_h}",
            "threshold_x": f"{tx:.1f}", "threshold": threshold, "ticks": ticks, "peak": peak,
            "below": below, "total": len(values)}


def collapse(text: str, first: bool, last: bool) -> list[tuple[str, str]]:
    """An unchanged run: whole if short, else its ends around a ("gap", count) marker."""
    if len(text) <= 2 * CONTEXT or (first and last and len(text) <= 4 * CONTEXT):
        return [("same", text)]
    if first and last:  # nothing changed: its beginning
        head, tail = text[:4 * CONTEXT], ""
    else:
        head = "" if first else text[:CONTEXT]
        tail = "" if last else text[-CONTEXT:]
    out = []
    if head:
        out.append(("same", head))
    out.append(("gap", f"{len(text) - len(head) - len(tail):,}"))
    if tail:
        out.append(("same", tail))
    return out


def diff_segments(a: str, b: str, spans: Sequence[Span]) -> tuple[list, list]:
    """Both sides of a side-by-side diff: ``a`` with its removed text as ("del", …) and ``b``
    with its added text as ("ins", …); long unchanged runs are collapsed."""
    left: list[tuple[str, str]] = []
    right: list[tuple[str, str]] = []
    pa = pb = 0
    n = len(spans)
    for i, s in enumerate(spans):
        left += collapse(a[pa:s.a_start], i == 0, False) if s.a_start > pa else []
        right += collapse(b[pb:s.b_start], i == 0, False) if s.b_start > pb else []
        if s.a_end > s.a_start:
            left.append(("del", a[s.a_start:s.a_end]))
        if s.b_end > s.b_start:
            right.append(("ins", b[s.b_start:s.b_end]))
        pa, pb = s.a_end, s.b_end
    left += collapse(a[pa:], n == 0, True) if pa < len(a) else []
    right += collapse(b[pb:], n == 0, True) if pb < len(b) else []
    return left, right


def span_lines(a: str, b: str, spans: Sequence[Span]) -> list[list[str]]:
    """The changed spans as `report explain` prints them (close spans merged), each
    [before, removed, added, after] with ``LINE_CONTEXT`` characters of context."""
    out = []
    for s in merge_close(a, b, list(spans))[:MAX_SPANS]:
        lead = "…" if s.a_start > LINE_CONTEXT else ""
        trail = "…" if s.a_end + LINE_CONTEXT < len(a) else ""
        out.append([lead + a[max(0, s.a_start - LINE_CONTEXT):s.a_start], s.a_text, s.b_text,
                    a[s.a_end:s.a_end + LINE_CONTEXT] + trail])
    return out


def changed_positions(x: Sequence[str], y: Sequence[str]) -> tuple[set[int], set[int]]:
    """Indices of ``x`` and of ``y`` outside the longest common runs (what differs)."""
    dx: set[int] = set()
    dy: set[int] = set()
    for op, i1, i2, j1, j2 in SequenceMatcher(None, list(x), list(y),
                                              autojunk=False).get_opcodes():
        if op != "equal":
            dx.update(range(i1, i2))
            dy.update(range(j1, j2))
    return dx, dy


def guard_segments(text: str, tokens: list, numbers_diff: set[int], units_diff: set[int]
                   ) -> list[tuple[str, str]]:
    """The text with each number the guard reads marked ("num"), or ("numdiff") when its
    number or one of its units is among the differing positions; far text collapsed."""
    out: list[tuple[str, str]] = []
    pos = ni = ui = 0
    for i, (start, end, numbers, units) in enumerate(tokens):
        differs = any(ni + j in numbers_diff for j in range(len(numbers))) or \
            any(ui + j in units_diff for j in range(len(units)))
        ni += len(numbers)
        ui += len(units)
        if start > pos:
            out += collapse(text[pos:start], i == 0, False)
        out.append(("numdiff" if differs else "num", text[start:end]))
        pos = end
    if pos < len(text) or not tokens:
        out += collapse(text[pos:], not tokens, True)
    return out


def pages(total: int, size: int) -> int:
    return max(1, -(-total // size))

