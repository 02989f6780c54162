"""What the command table holds about each command (`Command`, `FolderArg`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class FolderArg:
    """A folder argument of a command: its attribute, the kinds of folder it takes
    (`folders.KINDS`) and how the command's messages name it."""

    attr: str
    kinds: tuple[str, ...]
    called: str


@dataclass(frozen=True)
class Command:
    """One command of the command line.

    ``name`` is the command as typed (``"report verify"``); its parser sets it as the
    namespace's ``command_name``. ``run`` does the work and prints the result. ``profile``
    is its process set-up (a key of `runtime.PROFILES`; others need nothing). ``folders``
    are its local folder arguments, checked for the wrong kind of folder when the command
    fails (`folders.misplaced`)."""

    name: str
    run: Callable[[argparse.Namespace], None]
    profile: str = ""
    folders: tuple[FolderArg, ...] = ()
