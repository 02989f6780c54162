"""Takedowns that stay down (docs/takedowns.md): the log of takedown acts kept in the index
(`record`: `takedown add`, `lift`, `list`, `show`, whose arguments are
`near_dedup_core.commands.takedown`'s), and what a scan does with the takedowns in force
(`match`: every pool sample that is a taken-down text or a near copy of it is excluded, in
every split and scope).

The package imports nothing itself: a scan imports `match` only when it runs."""
