"""Plain text from man(7)/mdoc(7) troff sources, for the benchmark corpus.

Rendering 20,000+ pages with groff takes most of an hour on this box; the benchmarks only need
the running text (the words a reader sees), so requests are dropped, text-carrying macros keep
their arguments and inline escapes are resolved or removed. Tables keep their cells, equations
and macro definitions are dropped.
"""

from __future__ import annotations

import re
import shlex

#: Requests and macros that format or define things and carry no reader-visible text.
_SILENT = frozenset("""
TH Dd Dt Os de am ds as nr rr rm rn so ft ps vs ne sp in ti ll ta tc lc hy nh ad na fi nf
ce ul cu ev ss cs bd tm ab ig ec eo cc c2 pc lt pl bp wh ch dt it em mk rt ns rs ie if el
hc hw nm nn mc tr ss pn po ls fp fl lf cf sy pso open close write opena mso cp do
UC AT DT PD RS RE HP LP PP P Pp TP TQ IX UE ME EE EX YS sp br Bl El Bd Ed Ek Bk Ec
""".split())

#: Macros whose arguments alternate fonts and are joined without spaces.
_ALTERNATING = frozenset("BR RB BI IB IR RI".split())

#: Macros that start a new paragraph (their arguments, if any, are a heading or tag).
_BREAKS = frozenset("SH SS Sh Ss PP LP P Pp TP TQ IP HP sp br It Bl El Bd Ed Nm RS RE".split())

_SPECIAL = {
    "em": "—", "en": "–", "hy": "-", "mi": "-", "bu": "•", "aq": "'", "dq": '"', "lq": "“",
    "rq": "”", "oq": "‘", "cq": "’", "co": "©", "rg": "®", "tm": "™", "mu": "×", "+-": "±",
    "<=": "≤", ">=": "≥", "!=": "≠", "->": "→", "<-": "←", "de": "°", "Fo": "«", "Fc": "»",
    "ti": "~", "ha": "^", "rs": "\\", "ba": "|", "sl": "/", "at": "@", "sh": "#", "Do": "$",
    "lB": "[", "rB": "]", "lC": "{", "rC": "}", "la": "⟨", "ra": "⟩", "ga": "`", "ul": "_",
    "a\"": "\u030b", "'e": "é", "`e": "è", ":a": "ä", ":o": "ö", ":u": "ü", "ss": "ß",
}

_ESCAPE = re.compile(
    r"""\\(?:
        f(?:\[[^\]]*\]|\(..|.)          # font change
      | s[+-]?(?:\(\d\d|\[\d+\]|\d)     # point size
      | \((..)                          # \(xx special character
      | \[([^\]]*)\]                    # \[name] special character
      | \*(?:\(..|\[[^\]]*\]|.)         # string interpolation
      | n[+-]?(?:\(..|\[[^\]]*\]|.)     # number register
      | [hvwlLNbkoDXZRxY]'[^']*'        # escapes with a quoted argument
      | [hvwlLNbkoDXZRxY]\[[^\]]*\]
      | [kmM](?:\(..|\[[^\]]*\]|.)
      | (.)                             # any other single-character escape
    )""",
    re.VERBOSE,
)

_SINGLE = {"-": "-", "e": "\\", "\\": "\\", " ": " ", "~": " ", "0": " ", "t": "\t",
           "'": "'", "`": "`", ".": ".", '"': ""}


def _escape(match: re.Match[str]) -> str:
    special, named, single = match.group(1), match.group(2), match.group(3)
    if special is not None:
        return _SPECIAL.get(special, "")
    if named is not None:
        if named.startswith("u") and len(named) in (5, 6) and all(
                c in "0123456789ABCDEFabcdef" for c in named[1:]):
            return chr(int(named[1:], 16))
        return _SPECIAL.get(named, "")
    if single is not None:
        return _SINGLE.get(single, "")
    return ""


def _inline(text: str) -> str:
    return _ESCAPE.sub(_escape, text)


def _arguments(rest: str) -> list[str]:
    try:
        return shlex.split(rest, posix=True)
    except ValueError:
        return rest.split()


def troff_to_text(source: str) -> str:
    """Return the reader-visible text of a man or mdoc page source."""
    out: list[str] = []
    skip_until: str | None = None
    in_table_format = False
    brace_depth = 0
    for raw in source.splitlines():
        line = raw.rstrip()
        if skip_until is not None:
            if line.startswith(skip_until):
                skip_until = None
            continue
        if brace_depth:
            brace_depth += line.count("\\{") - line.count("\\}")
            brace_depth = max(brace_depth, 0)
            continue
        if in_table_format:
            if line.endswith("."):
                in_table_format = False
            continue
        if line.startswith((".\\\"", "'\\\"", ".\\#", "\\\"")) or line in (".", "'"):
            continue
        if line.startswith((".", "'")):
            parts = line[1:].lstrip().split(None, 1)
            if not parts:
                continue
            name, rest = parts[0], (parts[1] if len(parts) > 1 else "")
            if name in ("de", "am", "ig"):
                skip_until = ".."
                continue
            if name == "EQ":
                skip_until = ".EN"
                continue
            if name == "TS":
                in_table_format = True
                continue
            if name in ("TE", "EN"):
                continue
            if name in ("if", "ie", "el"):
                brace_depth = max(rest.count("\\{") - rest.count("\\}"), 0)
                continue
            if name in _BREAKS:
                out.append("")
            if name in _SILENT:
                continue
            args = _arguments(rest)
            if not args:
                continue
            joiner = "" if name in _ALTERNATING else " "
            out.append(_inline(joiner.join(args)))
            continue
        out.append(_inline(line))
    text = "\n".join(out)
    return re.sub(r"\n{3,}", "\n\n", text).strip()
