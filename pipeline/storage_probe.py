"""Fail fast on storage: reads a few files per remote scheme before the job starts.

Unreachable storage otherwise shows only inside the job, after each image read has
retried for minutes (GCS's client retries a refused connection for 120 s, Beam's S3 and
credential lookups back off for as long). Here each scheme's first files are read in
threads with one short deadline; the first that cannot be read stops the run with its URI
and the cause. A file that is merely missing is not a storage problem (its row is
dead-lettered as file_not_found later), once a listing shows its bucket is there.
Storage that answered but was still retrying at the deadline (a busy bucket's 503s, a
reset mid-read) is reachable: the run goes on with a warning, and the job retries too.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterable, Iterator

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from image_tfrecords.core.imaging.image_files import http_status
from image_tfrecords.core.storage.deadline import within_deadline
from image_tfrecords.core.storage.downloads import (
    DownloadFailed,
    DownloadSettings,
    download,
    is_url,
)
from image_tfrecords.core.storage.gcs_access import (
    GCS_SCHEME,
    read_anonymously,
    settle_gcs_credentials,
)

PROBE_SECONDS = 8.0  # for every probe together; a reachable bucket answers in well under 1 s
FILES_PER_SCHEME = 3
# One try each, within the probe's deadline (the job retries as --download_retries says).
_PROBE_DOWNLOADS = DownloadSettings(timeout_s=PROBE_SECONDS / 2, retries=0)
# Loggers through which the clients report what they retry (Beam's S3 reads log to the
# root logger); the last line one of them logged from a probe's thread is the cause a
# timed-out probe names.
_RETRY_LOGGERS = ("", "apache_beam.utils.retry", "google.api_core.retry", "urllib3.connectionpool")
# Loggers raised to DEBUG while the probes run: google-api-core says what it retries only
# there, and urllib3 logs each answer's status line there (botocore and the Google
# clients both use urllib3), which shows the storage answered; its other DEBUG lines
# (a new connection) say nothing of a cause.
_DEBUG_RETRY_LOGGER = "google.api_core.retry"
_ANSWERS_LOGGER = "urllib3.connectionpool"
_ANSWER_LINE = '%s://%s:%s "%s %s %s" %s %s'  # urllib3 2.x's format for a status line


class StorageUnreachable(Exception):
    """A probed file's storage cannot be used; the message names the URI and the cause."""


def probe_storage(uris: Iterable[str], seconds: float = PROBE_SECONDS) -> None:
    """Reads up to FILES_PER_SCHEME of `uris` per remote scheme, the schemes in parallel.

    Per scheme, files are tried in order until one reads (or is missing from a bucket
    that exists). Raises StorageUnreachable for the first failure; local paths are skipped.
    """
    by_scheme: dict[str, list[str]] = {}
    for uri in uris:
        scheme = uri.partition("://")[0] if "://" in uri else ""
        if scheme and len(by_scheme.setdefault(scheme, [])) < FILES_PER_SCHEME:
            by_scheme[scheme].append(uri)
    if not by_scheme:
        return
    if "gs" in by_scheme:
        settle_gcs_credentials()
    attempts = [_Attempt(found) for found in by_scheme.values()]
    with _retry_lines_recorded():
        within_deadline([attempt.run for attempt in attempts], seconds, "storage-probe")
    for attempt in attempts:
        if attempt.error is not None:
            if attempt.uri.startswith(GCS_SCHEME) and read_anonymously():
                raise StorageUnreachable(
                    f"{attempt.error} (read anonymously: no Google credentials were found)"
                )
            raise attempt.error
    for attempt in attempts:
        if not attempt.finished and attempt.answered:
            logging.warning(
                "%s: the storage answers, but had not given the file after "
                "%g s (the client retries: %s); going on, the job retries "
                "its reads as well",
                attempt.uri,
                seconds,
                attempt.last_line,
            )
        elif not attempt.finished:
            raise StorageUnreachable(
                f"{attempt.uri}: no answer within {seconds:g} s"
                + (
                    f"; the client retries: {attempt.last_line}"
                    if attempt.last_line
                    else " (host unreachable, or the client waits for credentials?)"
                )
            )


class _Attempt:
    """One scheme's probe: the URI being read, what its client last logged retrying,
    whether any request got an answer, and how it ended."""

    def __init__(self, uris: list[str]) -> None:
        self.uris = uris
        self.uri = uris[0]
        self.last_line: str | None = None
        self.answered = False
        self.error: StorageUnreachable | None = None
        self.finished = False

    def run(self) -> None:
        """Tries the files in order until one reads or is missing from its bucket."""
        _ATTEMPTS[threading.get_ident()] = self
        try:
            for uri in self.uris:
                self.uri, self.last_line = uri, None
                if _probe(uri):
                    break
        except StorageUnreachable as error:
            self.error = error
        except Exception as error:  # noqa: BLE001 - e.g. no filesystem for the scheme
            self.error = StorageUnreachable(f"{self.uri}: {_cause(error)}")
        finally:
            self.finished = True
            del _ATTEMPTS[threading.get_ident()]  # thread ids are reused


def _probe(uri: str) -> bool:
    """True when `uri` was read (a folder, ending in /, listed); False when it is missing
    from a bucket that exists."""
    if is_url(uri):
        return _probe_url(uri)
    if uri.endswith("/"):
        _list_one(uri, uri)
        return True
    try:
        with FileSystems.open(uri, compression_type=CompressionTypes.UNCOMPRESSED) as file:
            file.read(1)
        return True
    except Exception as error:
        if not (isinstance(error, FileNotFoundError) or http_status(error) == 404):
            raise StorageUnreachable(f"{uri}: {_cause(error)}") from error
    bucket = _bucket_of(uri) + "/"
    if not _list_one(uri, bucket):
        raise StorageUnreachable(f"{uri}: {bucket} does not exist or holds no file")
    return False


def _probe_url(uri: str) -> bool:
    """True when the URL answered with its body; False when its server answered with an
    HTTP error (the row's problem, retried and then dead-lettered in the job: a busy
    server answers some requests 503); StorageUnreachable when the server does not
    answer at all."""
    try:
        download(uri, _PROBE_DOWNLOADS)
        return True
    except DownloadFailed as failed:
        if failed.reason.startswith("http_") and failed.reason != "http_timeout":
            return False
        raise StorageUnreachable(f"{uri}: {failed.message}") from None


def _list_one(uri: str, folder: str) -> bool:
    """Whether `folder` holds a file; StorageUnreachable (naming `uri`) when it cannot
    be listed."""
    try:
        return bool(FileSystems.match([f"{folder}**"], limits=[1])[0].metadata_list)
    except Exception as error:
        raise StorageUnreachable(f"{uri}: cannot list {folder}: {_cause(error)}") from error


def _bucket_of(uri: str) -> str:
    """gs://bucket/a/b.jpg -> gs://bucket (an hdfs:// path's first folder)."""
    scheme, _, path = uri.partition("://")
    return f"{scheme}://{path.split('/', 1)[0]}"


def _cause(error: BaseException) -> str:
    """The innermost useful message: BeamIOError wraps each path's own error."""
    details = getattr(error, "exception_details", None)
    if details:
        return _cause(next(iter(details.values())))
    status = http_status(error)
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    return f"HTTP {status}: {text}" if status and str(status) not in text else text


# Probe thread id -> its attempt; read by the filter below from the clients' threads.
_ATTEMPTS: dict[int, _Attempt] = {}
# Logger name -> the level its records were shown from before the probes lowered it.
_SHOWN_FROM: dict[str, int] = {}


def _record_probe_retries(record: logging.LogRecord) -> bool:
    """A filter on the retry loggers: a line logged from a probe's thread is kept as its
    attempt's last line (a status line marks it answered) and not shown (the probe's
    error line says what matters), also from a probe still retrying after the launcher
    gave up on it. Other threads' lines show as they would without the probes."""
    attempt = _ATTEMPTS.get(record.thread)
    if attempt is None:
        return record.levelno >= _SHOWN_FROM.get(record.name, logging.NOTSET)
    if record.name == _ANSWERS_LOGGER and record.levelno == logging.DEBUG:
        attempt.answered = attempt.answered or record.msg == _ANSWER_LINE
    else:  # whole: a cut line ends mid-word, and its cause is at its end
        attempt.last_line = next(iter(record.getMessage().splitlines()), "")
    return False


@contextlib.contextmanager
def _retry_lines_recorded() -> Iterator[None]:
    """The filter above on each retry logger, and the two loggers above at DEBUG while
    the probes run."""
    for name in _RETRY_LOGGERS:
        logger = logging.getLogger(name)
        if _record_probe_retries not in logger.filters:
            logger.addFilter(_record_probe_retries)
    levels = {
        name: logging.getLogger(name).level for name in (_DEBUG_RETRY_LOGGER, _ANSWERS_LOGGER)
    }
    for name in levels:
        _SHOWN_FROM[name] = logging.getLogger(name).getEffectiveLevel()
        logging.getLogger(name).setLevel(logging.DEBUG)
    try:
        yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
            del _SHOWN_FROM[name]
