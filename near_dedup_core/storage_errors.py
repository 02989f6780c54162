"""A storage client's exception as one line: what went wrong with a request to object storage
(a missing bucket, credentials missing, expired or refused, access denied, throttling, an
object changed since it was listed, an unreachable endpoint), in words that name no
credential. s3fs, botocore, aiobotocore and gcsfs share no exception base, so the
description reads the error codes and class names along the exception's chain."""

from __future__ import annotations

import contextlib
import math
import os
import urllib.parse
from collections.abc import Iterator

from near_dedup_core.errors import NearDedupError

#: The setting of the deadline of each storage call, in seconds.
TIMEOUT_ENV = "NEAR_DEDUP_STORAGE_TIMEOUT"
#: Its default: longer than the client's own retries against a silent endpoint (about half a
#: minute), so that those end first with their own message.
DEFAULT_TIMEOUT = 60.0
#: The slowest transfer an upload or a read is given time for on top of the deadline, bytes
#: per second (a 5 GiB upload in one request: the deadline plus 85 minutes).
MIN_RATE = 1 << 20


def deadline(nbytes: int = 0) -> float:
    """Seconds one storage call may take, retries included: `TIMEOUT_ENV` (or
    `DEFAULT_TIMEOUT`), plus the time to move ``nbytes`` at `MIN_RATE`."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        base = DEFAULT_TIMEOUT
    else:
        try:
            base = float(raw)
        except ValueError:
            base = math.nan
        if not (math.isfinite(base) and base > 0):
            raise NearDedupError(f"{TIMEOUT_ENV}={raw!r}: expected a number of seconds "
                                 f"above 0")
    return base + nbytes / MIN_RATE

_BUCKET_MISSING = {"NoSuchBucket"}
_EXPIRED = {"ExpiredToken", "ExpiredTokenException", "TokenRefreshRequired", "RequestExpired"}
_BAD_CREDENTIALS = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken",
                    "InvalidClientTokenId", "UnrecognizedClientException"}
_DENIED = {"AccessDenied", "AllAccessDisabled", "AccountProblem", "Forbidden", "403"}
_THROTTLED = {"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded",
              "TooManyRequests", "TooManyRequestsException", "429", "503",
              "ServiceUnavailable", "RequestThrottled"}
_NO_CREDENTIALS = {"NoCredentialsError", "PartialCredentialsError",
                   "CredentialRetrievalError", "DefaultCredentialsError"}
_UNREACHABLE = {"EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError",
                "ConnectionClosedError", "ClientConnectorError", "ServerDisconnectedError",
                "ConnectionError", "TimeoutError", "FSTimeoutError", "ResponseStreamingError",
                "ClientPayloadError", "IncompleteReadError"}
_CHANGED = {"FileExpired"}
_MISSING = {"NoSuchKey", "404"}
#: What botocore raises (a RuntimeError) when the credential chain (a credential process,
#: an SSO or assumed-role cache, the container or instance role) hands out credentials whose
#: expiration has passed, and refreshing them gives expired ones again.
_EXPIRED_MESSAGE = "refreshed credentials are still expired"


def origin(url: str) -> str:
    """``scheme://host:port`` of a request URL: no path, query or user info."""
    parts = urllib.parse.urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}"


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def describe(exc: BaseException) -> str:
    """What went wrong with a storage request, in a few words that name no credential."""
    chain = list(_chain(exc))
    codes: list[str] = []
    for e in chain:
        response = getattr(e, "response", None)
        if isinstance(response, dict):
            err = response.get("Error") or {}
            status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
            codes += [str(c) for c in (err.get("Code"), status) if c]
    names = set().union(*(_names(e) for e in chain))
    if _BUCKET_MISSING & set(codes):
        return "no such bucket"
    if names & _NO_CREDENTIALS:
        return ("no credentials found (looked in the environment, the shared credentials "
                "and config files, and the instance role)")
    if _EXPIRED & set(codes) or any(_EXPIRED_MESSAGE in str(e) for e in chain):
        return "the credentials have expired"
    if _BAD_CREDENTIALS & set(codes):
        return "the credentials were refused (unknown access key, or wrong secret or token)"
    if _DENIED & set(codes) or "PermissionError" in names:
        return "access denied"
    if _THROTTLED & set(codes):
        return (f"throttled by the storage ({codes[0]}), still failing after the client's "
                f"retries")
    if names & _CHANGED or "PreconditionFailed" in codes:
        return "changed while being read (its version is no longer the one listed)"
    if "FSTimeoutError" in names:
        return (f"no answer from the storage within the deadline ({deadline():g} s, "
                f"{TIMEOUT_ENV})")
    if names & _UNREACHABLE:
        urls = [getattr(e, "kwargs", {}).get("endpoint_url") for e in chain
                if isinstance(getattr(e, "kwargs", None), dict)]
        endpoint = next((origin(u) for u in urls if isinstance(u, str) and u), None)
        return (f"cannot reach the storage endpoint{' ' + endpoint if endpoint else ''} "
                f"({type(chain[-1]).__name__}, still failing after the client's retries)")
    if "FileNotFoundError" in names or _MISSING & set(codes):
        return "not found"
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"storage error ({detail})"


@contextlib.contextmanager
def errors(url: str, consequence: str | None = None) -> Iterator[None]:
    """Turn a storage client's exception into one `NearDedupError` line naming ``url``."""
    try:
        yield
    except NearDedupError:
        raise
    except Exception as exc:  # the client's exceptions have no common base but Exception
        tail = f"; {consequence}" if consequence else ""
        raise NearDedupError(f"{url}: {describe(exc)}{tail}") from None

