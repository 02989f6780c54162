"""Takedowns that stay down (docs/takedowns.md): the log of takedown acts kept in the index
(`record`: `takedown add`, `lift`, `list`, `show`) and what a scan does with the takedowns in
force (`match`: every pool sample that is a taken-down text or a near copy of it is
excluded, in every split and scope)."""

from near_dedup_core.takedown.record import (
    Text,
    acts_of,
    add,
    in_force,
    lift,
    list_lines,
    read_acts,
    show,
    show_text,
    summary,
    texts_from_file,
    texts_from_jsonl,
    texts_from_package,
)

__all__ = ["Text", "acts_of", "add", "in_force", "lift", "list_lines", "read_acts", "show",
           "show_text", "summary", "texts_from_file", "texts_from_jsonl",
           "texts_from_package"]
