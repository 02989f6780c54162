"""Connecting the driver to Ray in one line: where Ray's own messages go, and what a refused
authentication token says.

Ray's core writes its warnings (retries of a cluster that refuses the driver, the machine's
address it could not find, …) straight to the process's standard error while it connects and
disconnects, before its own log files are set up. Those writes go to a log file instead
(`ray_log`, `ray_output_to`): ``NEAR_DEDUP_RAY_LOG`` names it (default
``near-dedup-ray-UID.log`` in the temporary folder), ``NEAR_DEDUP_RAY_LOG=-`` leaves them on
the terminal. A failure names the file.

A cluster whose head runs with token authentication (``RAY_AUTH_MODE=token``) refuses a driver
without its token; Ray then retries for about twenty seconds, one warning a second. The
driver asks the cluster's control service once before (`check_token`), and a refusal is one
line naming the settings that carry the token.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: Where Ray's own messages of the driver go: a file, or ``-`` for standard error.
LOG_ENV = "NEAR_DEDUP_RAY_LOG"
#: Ray's settings of token authentication (Ray ≥ 2.50).
AUTH_MODE_ENV = "RAY_AUTH_MODE"


def ray_log() -> str | None:
    """The file that takes Ray's messages, or None when they stay on standard error."""
    chosen = os.environ.get(LOG_ENV, "")
    if chosen == "-":
        return None
    return chosen or os.path.join(tempfile.gettempdir(), f"near-dedup-ray-{os.getuid()}.log")


@contextmanager
def ray_output_to(log: str | None) -> Iterator[None]:
    """Within the block, what is written to standard error, by Ray's core (file descriptor 2)
    or by Python code (``sys.stderr``), is appended to ``log`` instead (discarded if ``log``
    cannot be opened); ``None`` changes nothing."""
    if log is None:
        yield
        return
    try:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError:
        fd = os.open(os.devnull, os.O_WRONLY)
    sys.stderr.flush()
    saved_fd, saved_stream = os.dup(2), sys.stderr
    os.dup2(fd, 2)
    os.close(fd)
    sys.stderr = open(os.dup(2), "w", encoding="utf-8", errors="replace")  # noqa: SIM115
    try:
        yield
    finally:
        sys.stderr.close()
        sys.stderr = saved_stream
        os.dup2(saved_fd, 2)
        os.close(saved_fd)


class TokenRefused(Exception):
    """The cluster refused this process's authentication token (or its lack of one)."""


def check_token(address: str, ray: Any) -> None:
    """Raise `TokenRefused` if the cluster at ``address`` (``host:port`` of its head) refuses
    this process's token; any other answer is left to ``ray.init``. One request, about a
    second, instead of Ray's twenty."""
    _, sep, port = address.rpartition(":")
    if address.startswith("ray://") or not sep or not port.isdigit():
        return
    try:
        _ask_control_service(address)
    except ray.exceptions.AuthenticationError:
        raise TokenRefused from None
    except Exception:  # noqa: BLE001 - unreachable, not a cluster: ray.init says which
        return


def _ask_control_service(address: str) -> None:
    """Connect once to the control service (GCS) of the cluster at ``address``."""
    # Ray (2.60) has no public call that asks the GCS once: `ray.init` retries for twenty
    # seconds, and `ray.util.state` asks the dashboard; Ray's own CLI and state API use this
    # class, which its type stub (`_raylet.pyi`) does not declare.
    from ray._raylet import GcsClient  # type: ignore[attr-defined]

    GcsClient(address=address)


def token_message(address: str) -> str:
    """One line: the cluster refused the token, and the settings that give it."""
    if os.environ.get(AUTH_MODE_ENV, "").lower() != "token":
        return (f"ray: cluster {address} requires its authentication token: set "
                f"{AUTH_MODE_ENV}=token and RAY_AUTH_TOKEN to the token of its head (or "
                "RAY_AUTH_TOKEN_PATH to a file holding it), as in docs/ray.md")
    return (f"ray: cluster {address} refused this command's authentication token "
            "(RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token): set RAY_AUTH_TOKEN "
            "to the token of its head")


def is_token_refusal(exc: BaseException, ray: Any) -> bool:
    """Whether ``exc``, raised by ``ray.init``, is a refused authentication token (Ray wraps
    the refusal of its last attempt in a RuntimeError's text)."""
    return isinstance(exc, (TokenRefused, ray.exceptions.AuthenticationError)) \
        or "InvalidAuthToken" in str(exc)
