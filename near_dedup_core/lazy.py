"""A package's names loaded from its modules on first use (PEP 562), for the packages whose
workers must not import everything the command's own process does (`index_store`,
`ingest`): the package imports none of its heavy modules, and its ``__getattr__`` finds a
name in them the first time it is asked for, then keeps it in the package."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Any

_MISSING = object()


def lazy_names(package: str, submodules: Sequence[str], sources: Sequence[str]
               ) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: one of its ``submodules`` by name (imported as
    ``from package import module`` would, so that a module imported first, whose own imports
    name its siblings, never imports ``sources`` half-way), else the name from the first of
    the ``sources`` modules that has it, imported then and kept in the package."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        if not name.startswith("__"):
            if name in submodules:
                return importlib.import_module(f"{package}.{name}")
            for module in sources:
                value = getattr(importlib.import_module(module), name, _MISSING)
                if value is not _MISSING:
                    namespace[name] = value
                    return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
