"""The one shape of what a command returns about a frozen folder it wrote or verified (a
scan's report, a contamination report, a verified report): the folder, its manifest's
``counts``, and `summary`, the one line the CLI prints."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path


@dataclass
class FolderResult(ABC):
    """A frozen folder and its manifest's ``counts``; subclasses say it in one line."""

    path: Path | str  # a local folder, or a URL (`storage`)
    counts: dict

    @abstractmethod
    def summary(self) -> str:
        """The one line the CLI prints for this result."""
