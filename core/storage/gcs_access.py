"""gs:// without credentials: a GCS emulator (STORAGE_EMULATOR_HOST), or a public bucket.

Beam's GCS client asks for Google credentials before it connects, and where there are
none it retries google.auth.default four times with backoff (about 20 s) before it
connects anonymously: longer than the launcher's storage probe waits, and again in every
worker process. Here google.auth is asked once per process, the first time a gs:// path
is used; where it finds no credentials, or an emulator is set (which needs none, and
against which real credentials would only be refreshed at Google), Beam's credential
cache is set to "none" so that its client connects anonymously at once. Where there are
credentials nothing changes: Beam finds them itself, at its first try.
"""

from __future__ import annotations

import os
import threading

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
        # Beam keeps no public switch for it; tests/test_cloud_storage.py fails if this
        # cache stops being what its GCS client reads.
        from apache_beam.internal.gcp.auth import _Credentials

        with _Credentials._credentials_lock:
            if not _Credentials._credentials_init:
                _Credentials._credentials, _Credentials._credentials_init = None, True


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
