"""Errors the CLI turns into one line on stderr and an exit code.

`NearDedupError` is bad input, usage or state (exit 1); `LimitExceeded` is a configured
limit that was hit (exit 2). Messages name the package, file and line where there is one.
"""


class NearDedupError(Exception):
    """Invalid input, usage or state. The CLI prints the message and exits 1."""

    exit_code = 1


class LimitExceeded(NearDedupError):
    """A configured limit (max_chars, max_candidates, max_pool_records) was exceeded: exit 2."""

    exit_code = 2


def where(package: str, file: str | None = None, line: int | None = None) -> str:
    """Location prefix for messages: ``package cpt-v2, data/train/part-00000.jsonl:17``."""
    text = f"package {package}"
    if file is not None:
        text += f", {file}"
        if line is not None:
            text += f":{line}"
    return text
