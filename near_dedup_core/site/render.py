"""Rendering the site's pages: the Jinja2 environment (autoescaping on, `StrictUndefined`),
the helpers its templates call, and the writer that puts each file into the output folder
and hashes it as written."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup, escape

from near_dedup_core.audit.sources import Key
from near_dedup_core.report import REASONS
from near_dedup_core.site import views

HERE = Path(__file__).parent


def environment() -> Environment:
    """The templates' environment: every template autoescaped, a missing value an error,
    numbers formatted explicitly (the same data gives the same bytes)."""
    env = Environment(loader=FileSystemLoader(HERE / "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                      keep_trailing_newline=True)
    env.filters["num"] = lambda v: "-" if v is None else f"{v:,}"
    env.filters["jac"] = lambda v: "-" if v is None else f"{v:.4f}"
    env.filters["rate"] = lambda v: "-" if v is None else views.fmt_rate(v)
    env.filters["json"] = lambda v: json.dumps(v, ensure_ascii=False, sort_keys=True)
    env.filters["short"] = lambda v: "-" if v is None else f"{str(v)[:12]}…"
    env.globals["anchor"] = views.anchor
    env.globals["sample_link"] = sample_link
    env.globals["segments"] = segments_html
    env.globals["reasons"] = REASONS
    return env


#: How `segments` marks each kind of text segment (`site.views`): opening and closing tags.
_SEGMENT_TAGS = {"same": ("", ""), "del": ("<del>", "</del>"), "ins": ("<ins>", "</ins>"),
                 "gap": ('<span class="gap">… ', ' unchanged characters …</span>'),
                 "span": ('<mark class="span">', "</mark>"),
                 "numdiff": ('<mark class="numdiff">', "</mark>")}
_NUM_TAGS = ('<mark class="num">', "</mark>")


def segments_html(segs: Sequence[tuple[str, str]]) -> Markup:
    """Text segments as HTML, each escaped and marked by its kind (a diff's removed and
    added text, a collapsed gap, a guard number, a contaminated span): built here, not by a
    template macro, since the diff pages hold a hundred thousand of them."""
    out = []
    for kind, text in segs:
        start, end = _SEGMENT_TAGS.get(kind, _NUM_TAGS)
        out.append(f"{start}{escape(text)}{end}")
    return Markup("".join(out))


def sample_link(root: str, key: Key | None) -> Markup:
    """A link to a sample's explanation on the search page (built here, not by a template
    macro: the cluster lists hold hundreds of thousands of them)."""
    if key is None:
        return Markup("-")
    pkg, sid = key
    return Markup(f'<a class="sample" href="{escape(root)}search.html#p={escape(quote(pkg))}'
                  f'&amp;s={escape(quote(sid))}">{escape(pkg)}/{escape(sid)}</a>')


class Writer:
    """Renders templates into the temporary output folder."""

    def __init__(self, out: Path, base: dict) -> None:
        self.out = out
        self.env = environment()
        self.base = base
        self.count = 0
        #: sha256 of every file written, by relative path (`fsutil.write_checksums` reads
        #: none of them again)
        self.digests: dict[str, str] = {}

    def page(self, rel: str, template: str, **ctx) -> None:
        depth = rel.count("/")
        html = self.env.get_template(template).render(**self.base, root="../" * depth,
                                                      here=rel, **ctx)
        self.raw(rel, html.encode("utf-8"))

    def raw(self, rel: str, data: bytes) -> None:
        path = self.out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        self.digests[rel] = hashlib.sha256(data).hexdigest()
        self.count += 1
