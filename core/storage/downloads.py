"""Images at http:// and https:// URLs, downloaded by the worker process that writes their
shard, with what img2dataset's users rely on: a timeout per request, retries with
exponential backoff on 5xx, 429 (honouring Retry-After) and dropped or refused
connections, a limit of concurrent requests per host, a maximum size, and a User-Agent
naming the project. What still fails is a DownloadFailed with a reason of its own
(`http_404`, `http_timeout`, `too_large`...), which becomes the row's dead letter.

A server is a stranger: a try ends DEADLINE_FACTOR x the timeout after it started
however steadily the body drips in, a redirect is followed only on the same scheme, host
and port (at most MAX_REDIRECTS), and its body is never the image. Messages name the URL
as core/storage/redaction.py shows it, without its credentials.

Requests go through one urllib3 PoolManager per process (thread-safe, connections kept
alive per host); the shard writer's reader threads are what makes them concurrent.
"""

from __future__ import annotations

import dataclasses
import email.utils
import random
import threading
import time
import urllib.parse
from importlib import metadata

import urllib3

from image_tfrecords.core.storage.redaction import redacted

SCHEMES = ("http://", "https://")
_BACKOFF_S = 0.5  # before the first retry; doubled for each next one
_MAX_WAIT_S = 30.0  # the longest pause between two tries, whatever Retry-After says
_CHUNK = 1 << 16
# A try still reading its body this many --download_timeout after it started is abandoned
# (http_timeout, not retried: the server is sending, too slowly). The timeout alone
# bounds each wait, so a byte every few seconds held a row for minutes.
DEADLINE_FACTOR = 3
# Redirects followed in one try, each on the URL's own scheme, host and port.
MAX_REDIRECTS = 5


def version() -> str:
    try:
        return metadata.version("image-tfrecords")
    except metadata.PackageNotFoundError:
        return "dev"


@dataclasses.dataclass(frozen=True)
class DownloadSettings:
    """How image URLs are downloaded (--download_* options)."""

    timeout_s: float = 10.0  # to connect, and between two reads of the response
    retries: int = 3  # more tries after the first, for 5xx, 429 and connection errors
    max_bytes: int = 64 << 20  # a larger image is too_large
    per_host: int = 16  # concurrent requests to one host, per worker process
    threads: int = 32  # a shard's readers when it holds URLs (img2dataset uses many)
    user_agent: str = f"image-tfrecords/{version()} (image dataset converter)"

    @property
    def deadline_s(self) -> float:
        """How long after a try began its body may still be arriving (the check comes with
        each read, which may wait timeout_s: a try ends within deadline_s + timeout_s)."""
        return DEADLINE_FACTOR * self.timeout_s


class DownloadFailed(Exception):
    """A URL that gave no image bytes: `reason` a dead-letter reason, `message` why."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


def is_url(uri: str) -> bool:
    return uri.startswith(SCHEMES)


def download(uri: str, settings: DownloadSettings) -> bytes:
    """The body of a GET of `uri`, after the retries `settings` allow."""
    for attempt in range(settings.retries + 1):
        try:
            with _host_slot(uri, settings):
                return _get(uri, settings)
        except _Retryable as problem:
            if attempt == settings.retries:
                raise DownloadFailed(
                    problem.reason,
                    f"{problem.message} (after {attempt + 1} tries): {redacted(uri)}",
                ) from None
            time.sleep(
                min(
                    _MAX_WAIT_S,
                    problem.wait_s or _BACKOFF_S * 2**attempt * random.uniform(1.0, 1.5),
                )
            )
    raise AssertionError("unreachable")


def content_length(uri: str, settings: DownloadSettings) -> int:
    """The size a HEAD of `uri` announces; DownloadFailed when it announces none."""
    try:
        with _host_slot(uri, settings):
            response = _answer("HEAD", uri, settings)
            response.close()
    except urllib3.exceptions.HTTPError as error:
        raise DownloadFailed(
            "connection_error", f"{type(error).__name__}: {redacted(uri)}"
        ) from None
    length = response.headers.get("Content-Length")
    if response.status >= 400 or not (length or "").isdigit():
        raise DownloadFailed(
            f"http_{response.status}", f"HTTP {response.status}, no size: {redacted(uri)}"
        )
    return int(length)


class _Retryable(Exception):
    def __init__(self, reason: str, message: str, wait_s: float | None = None) -> None:
        super().__init__(message)
        self.reason, self.message, self.wait_s = reason, message, wait_s


def _answer(method: str, uri: str, settings: DownloadSettings) -> urllib3.BaseHTTPResponse:
    """The response to `method` `uri`, its body unread, after the redirects allowed: on
    the same scheme, host and port, at most MAX_REDIRECTS. A 3xx's own body is never read
    (it is the server's page, not the image); one that goes elsewhere is a DownloadFailed
    http_3xx naming where."""
    asked = uri
    for _ in range(MAX_REDIRECTS + 1):
        response = _pool().request(
            method,
            uri,
            headers=_headers(settings),
            timeout=_timeout(settings),
            retries=False,
            redirect=False,
            preload_content=False,
        )
        if not 300 <= response.status < 400:
            return response
        response.close()
        status, location = response.status, response.headers.get("Location")
        if not location:
            raise DownloadFailed(
                f"http_{status}", f"HTTP {status} without a Location: {redacted(asked)}"
            )
        target = urllib.parse.urljoin(uri, location)
        if _origin(target) != _origin(uri):
            raise DownloadFailed(
                f"http_{status}",
                f"HTTP {status} to {redacted(target)}: "
                "a redirect to another scheme, host or port is not "
                f"followed: {redacted(asked)}",
            )
        uri = target
    raise DownloadFailed(
        f"http_{status}", f"more than {MAX_REDIRECTS} redirects: {redacted(asked)}"
    )


def _origin(uri: str) -> tuple[str, str | None, int | None]:
    parts = urllib.parse.urlsplit(uri)
    return parts.scheme.lower(), parts.hostname, parts.port


def _get(uri: str, settings: DownloadSettings) -> bytes:
    deadline = time.monotonic() + settings.deadline_s
    try:
        response = _answer("GET", uri, settings)
    except urllib3.exceptions.NewConnectionError as error:  # a TimeoutError subclass too
        raise _Retryable("connection_error", f"cannot connect: {_cause(error)}") from None
    except urllib3.exceptions.TimeoutError:
        raise _Retryable("http_timeout", f"no answer within {settings.timeout_s:g} s") from None
    except urllib3.exceptions.HTTPError as error:
        raise _Retryable("connection_error", f"cannot connect: {_cause(error)}") from None
    read_whole = False
    try:
        status = response.status
        if status == 429 or status >= 500:
            raise _Retryable(
                f"http_{status}",
                f"HTTP {status}",
                _retry_after(response.headers.get("Retry-After")),
            )
        if status >= 400:
            raise DownloadFailed(f"http_{status}", f"HTTP {status}: {redacted(uri)}")
        declared = response.headers.get("Content-Length")
        if declared and declared.isdigit() and int(declared) > settings.max_bytes:
            raise DownloadFailed(
                "too_large",
                f"{int(declared):,} bytes, more than the "
                f"{settings.max_bytes:,} allowed (--max_download_mb): "
                f"{redacted(uri)}",
            )
        body = _body(response, uri, settings, deadline)
        read_whole = True
        return body
    except urllib3.exceptions.TimeoutError:
        raise _Retryable("http_timeout", f"the body stalled for {settings.timeout_s:g} s") from None
    except (urllib3.exceptions.ProtocolError, urllib3.exceptions.DecodeError) as error:
        raise _Retryable("connection_error", f"the body was cut: {_cause(error)}") from None
    finally:
        if read_whole:
            response.release_conn()  # kept alive for the host's next request
        else:  # what is left unread must not be read as the next request's answer
            response.close()


def _body(
    response: urllib3.BaseHTTPResponse, uri: str, settings: DownloadSettings, deadline: float
) -> bytes:
    """The response's body, read as it comes (read1: whatever one read gives, so that a
    dripping body is seen dripping), until `deadline` or max_bytes."""
    body = bytearray()
    while chunk := response.read1(_CHUNK):
        body += chunk
        if len(body) > settings.max_bytes:
            raise DownloadFailed(
                "too_large",
                f"more than the {settings.max_bytes:,} "
                f"bytes allowed (--max_download_mb): {redacted(uri)}",
            )
        if time.monotonic() > deadline:
            raise DownloadFailed(
                "http_timeout",
                f"not all of the body within "
                f"{settings.deadline_s:g} s ({DEADLINE_FACTOR} x "
                f"--download_timeout): {redacted(uri)}",
            )
    return bytes(body)


def _retry_after(value: str | None) -> float | None:
    """Retry-After in seconds (a number, or an HTTP date); None when absent or unreadable."""
    if not value:
        return None
    if value.strip().isdigit():
        return float(value)
    try:
        return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _cause(error: BaseException) -> str:
    reason = getattr(error, "reason", None)
    return f"{type(error).__name__}: {reason or error}"


def _headers(settings: DownloadSettings) -> dict[str, str]:
    return {"User-Agent": settings.user_agent}


def _timeout(settings: DownloadSettings) -> urllib3.Timeout:
    return urllib3.Timeout(connect=settings.timeout_s, read=settings.timeout_s)


_lock = threading.Lock()
_shared_pool: urllib3.PoolManager | None = None
_hosts: dict[str, threading.BoundedSemaphore] = {}


def _pool() -> urllib3.PoolManager:
    """One per process: connections kept alive, up to 64 per host."""
    global _shared_pool
    with _lock:
        if _shared_pool is None:
            _shared_pool = urllib3.PoolManager(num_pools=256, maxsize=64, block=False)
        return _shared_pool


def _host_slot(uri: str, settings: DownloadSettings) -> threading.BoundedSemaphore:
    """The semaphore that keeps this process's requests to the URI's host to per_host."""
    host = urllib.parse.urlsplit(uri).netloc.lower()
    with _lock:
        if host not in _hosts:
            _hosts[host] = threading.BoundedSemaphore(settings.per_host)
        return _hosts[host]
