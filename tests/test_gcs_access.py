"""settle_gcs_credentials: Beam's credential cache set to "none" for gs:// without
credentials where Beam's _Credentials has the shape that relies on; on a Beam of another
shape, left alone and one warning. (tests/test_cloud_storage.py checks, against a GCS
emulator, that Beam's client then connects at once.)"""

import logging

import pytest
from apache_beam.internal.gcp import auth

from image_tfrecords.core.storage import gcs_access


@pytest.fixture
def unsettled(monkeypatch):
    """A process that has not settled yet, against an emulator (so that google.auth is
    not asked), Beam's cache as Beam starts; all undone after."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")
    monkeypatch.setattr(gcs_access, "_settled", False)
    monkeypatch.setattr(gcs_access, "_anonymous", False)
    monkeypatch.setattr(auth._Credentials, "_credentials_init", False)
    monkeypatch.setattr(auth._Credentials, "_credentials", "Beam's own search")


def test_the_installed_beams_cache_fits_and_is_set_to_none(unsettled, caplog):
    assert gcs_access._beams_credential_cache() is auth._Credentials
    with caplog.at_level(logging.WARNING, logger=gcs_access.__name__):
        gcs_access.settle_gcs_credentials()
    assert (auth._Credentials._credentials_init, auth._Credentials._credentials) == (True, None)
    assert not caplog.records


def test_a_beam_whose_cache_has_another_shape_is_left_alone_and_says_so(
    unsettled, monkeypatch, caplog
):
    class Credentials:  # a Beam whose cache has no _credentials_init
        _credentials_lock = auth._Credentials._credentials_lock
        _credentials = "Beam's own search"

        @classmethod
        def get_service_credentials(cls, pipeline_options):
            return cls._credentials

    monkeypatch.setattr(auth, "_Credentials", Credentials)
    with caplog.at_level(logging.WARNING, logger=gcs_access.__name__):
        gcs_access.settle_gcs_credentials()
        gcs_access.settle_gcs_credentials()
    (warning,) = [record.getMessage() for record in caplog.records]
    assert warning.startswith("gs:// without Google credentials waits through Beam's own")
    assert warning.endswith(": _Credentials._credentials_init is missing.")
    assert Credentials._credentials == "Beam's own search"
    assert not hasattr(Credentials, "_credentials_init")
