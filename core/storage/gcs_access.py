"""gs:// without credentials: a GCS emulator (STORAGE_EMULATOR_HOST), or a public bucket.

Beam's GCS client asks for Google credentials before it connects, and where there are
none it retries google.auth.default four times with backoff (about 20 s) before it
connects anonymously: longer than the launcher's storage probe waits, and again in every
worker process. Here google.auth is asked once per process, the first time a gs:// path
is used; where it finds no credentials, or an emulator is set (which needs none, and
against which real credentials would only be refreshed at Google), Beam's credential
cache is set to "none" so that its client connects anonymously at once. Where there are
credentials nothing changes: Beam finds them itself, at its first try.

Beam keeps no public switch for it. The cache is apache_beam.internal.gcp.auth's
_Credentials (its _credentials_lock, _credentials_init and _credentials), which
get_service_credentials reads: the same on Beam 2.69.0 to 2.78.0. That shape is checked
before the cache is set (core/storage/beam_internals.py); on a Beam without it, one
warning says so, and gs:// without credentials waits through Beam's own retries.
"""

from __future__ import annotations

import logging
import os
import threading

from image_tfrecords.core.storage.beam_internals import Unfit, attribute, beam_version, names

GCS_SCHEME = "gs://"
_lock = threading.Lock()
_settled = False
_anonymous = False


def settle_gcs_credentials() -> None:
    """Once per process: anonymous access where there are no Google credentials."""
    global _settled, _anonymous
    with _lock:
        if _settled:
            return
        _settled = True
        if not os.environ.get("STORAGE_EMULATOR_HOST") and _has_credentials():
            return
        _anonymous = True
        try:
            cache = _beams_credential_cache()
        except Unfit as unfit:
            logging.getLogger(__name__).warning(
                "gs:// without Google credentials waits through Beam's own search for them "
                "(about 20 s, in every process) before it connects anonymously: "
                "image-tfrecords cannot set Beam's credential cache on %s: %s.",
                beam_version(),
                unfit,
            )
            return
        with cache._credentials_lock:
            if not cache._credentials_init:
                cache._credentials, cache._credentials_init = None, True


def _beams_credential_cache() -> type:
    """Beam's _Credentials, once checked to hold the cache its GCS client reads
    (tests/test_cloud_storage.py checks that the client then connects at once)."""
    try:
        from apache_beam.internal.gcp import auth
    except ImportError as error:
        raise Unfit(f"apache_beam.internal.gcp.auth cannot be imported ({error})") from None
    cache = attribute(auth, "_Credentials", "apache_beam.internal.gcp.auth")
    lock = attribute(cache, "_credentials_lock", "_Credentials")
    if not (hasattr(lock, "__enter__") and hasattr(lock, "__exit__")):
        raise Unfit(f"_Credentials._credentials_lock is {lock!r}, not a lock")
    for name in ("_credentials_init", "_credentials"):
        attribute(cache, name, "_Credentials")
    reader = attribute(cache, "get_service_credentials", "_Credentials")
    names("_Credentials.get_service_credentials", reader, ("_credentials_init", "_credentials"))
    return cache


def read_anonymously() -> bool:
    """Whether this process reads gs:// without credentials (none found, no emulator)."""
    return _anonymous and not os.environ.get("STORAGE_EMULATOR_HOST")


def _has_credentials() -> bool:
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        google.auth.default()
    except DefaultCredentialsError:
        return False
    return True
