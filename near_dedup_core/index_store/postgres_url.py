"""What a PostgreSQL index's URL is, without loading SQLAlchemy or a driver: its schemes
(`is_postgres_url`) and its form in messages (`label`)."""

from __future__ import annotations

#: The URL schemes of a PostgreSQL index.
SCHEMES = ("postgresql://", "postgres://")


def is_postgres_url(value: str) -> bool:
    """Whether ``value`` names a PostgreSQL index."""
    return value.startswith(SCHEMES)


def label(url: str) -> str:
    """``postgresql://user@host:port/db`` without the password, for messages."""
    scheme, _, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    userinfo, at, host = netloc.rpartition("@")
    user = userinfo.split(":", 1)[0] + "@" if at else ""
    return f"{scheme}://{user}{host}{slash}{path.split('?', 1)[0]}"
