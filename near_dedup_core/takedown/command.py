"""The work of `takedown add|lift|list|show` (its parser is `commands.takedown`);
``takedown check`` reads mixtures, a floor above, and stays there."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from near_dedup_core.errors import NearDedupError

if TYPE_CHECKING:
    from near_dedup_core import index_store as db


def run(args: argparse.Namespace, index: db.Index) -> list[str]:
    """The lines `takedown add|lift|list|show` prints."""
    from near_dedup_core.takedown import record

    sub = args.takedown_command
    if sub == "add":
        if args.sample and args.package is None:
            raise NearDedupError("usage: takedown add --sample goes with --package DIR")
        texts = (record.texts_from_file(args.text) if args.text is not None else
                 record.texts_from_jsonl(args.jsonl) if args.jsonl is not None else
                 record.texts_from_package(args.package, args.sample))
        act = record.add(index, args.request, args.reason, texts, by=args.by,
                         keep_text=args.keep_text)
        return [record.summary(act, index.label)]
    if sub == "lift":
        return [record.summary(record.lift(index, args.request, args.reason, by=args.by),
                               index.label)]
    acts, _config = record.read_acts(index)
    if sub == "list":
        return record.list_lines(acts)
    import orjson

    shown = record.show(acts, args.request, index.label)
    return [orjson.dumps(shown, option=orjson.OPT_SORT_KEYS).decode() if args.json
            else record.show_text(shown)]
