"""Takedowns that stay down (docs/takedowns.md): the log of takedown acts kept in the index
(`record`: `takedown add`, `lift`, `list`, `show`; `command`: their arguments), and what a
scan does with the takedowns in force (`match`: every pool sample that is a taken-down text
or a near copy of it is excluded, in every split and scope).

The package imports nothing itself: the CLI builds the `command` parser for every command,
before it knows whether a takedown runs."""
