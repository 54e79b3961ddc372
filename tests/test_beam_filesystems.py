"""settle_beam_filesystems: Beam's HDFS and S3 internals replaced only on the versions
the replacements were read against; Beam's own left, and said so, on any other."""

import ast
import hashlib
import inspect
import logging
from importlib.metadata import version
from pathlib import Path

import pytest
from apache_beam.io import hadoopfilesystem
from apache_beam.io.aws.clients.s3 import boto3_client
from source_trees import parse

from image_tfrecords.core.storage import beam_filesystems
from image_tfrecords.core.storage.beam_filesystems import (
    HDFS_FIX,
    S3_FIX,
    VERIFIED_ON,
    UnverifiedBeam,
    settle_beam_filesystems,
)

# What the replacements stand in for or call, as read on the versions in VERIFIED_ON.
BEAMS_OWN = {
    "HadoopFileSystem._list": "830a8c36c530a319",
    "HadoopFileSystem.rename": "5cbb2c0c9dd26175",
    "HadoopFileSystem._parse_url": "ba2701e0b76c820f",
    "HadoopFileSystem._join": "b0e467f19251251f",
    "Client.__init__": "92d5f127ab705de3",
}


def test_the_installed_versions_are_those_the_replacements_were_read_against():
    # Fails when a pin in requirements.txt moves: read Beam's apache_beam/io/hadoopfilesystem.py and
    # aws/clients/s3/boto3_client.py (and the hdfs library's Client) again, then move
    # VERIFIED_ON in core/storage/beam_filesystems.py.
    for fix in VERIFIED_ON:
        assert beam_filesystems.unverified_versions(fix) == [], fix
    assert version("apache-beam") == VERIFIED_ON[HDFS_FIX]["apache-beam"]


def test_beams_own_code_the_replacements_depend_on_is_as_it_was_read():
    # A digest of each Beam function replaced or called; fails on any change to them.
    assert {name: _digest(source) for name, source in _beams_own().items()} == BEAMS_OWN


def test_both_are_installed_here_once():
    settle_beam_filesystems()
    settle_beam_filesystems("hdfs://namenode/folder")
    assert hadoopfilesystem.HadoopFileSystem._list.__name__ == "list_every_file"
    assert hadoopfilesystem.HadoopFileSystem.rename.__name__ == "rename_over_files"
    assert boto3_client.Client.__init__.__name__ == "made_once"
    # Once: the shared client is made by Beam's own __init__, not by a replacement of it.
    assert (
        inspect.getclosurevars(boto3_client.Client.__init__).nonlocals["make"].__qualname__
        == "Client.__init__"
    )


def test_on_another_beam_beams_own_stay_hdfs_is_refused_and_s3_works_as_beams_own(
    monkeypatch, caplog
):
    beams = {"_list": object(), "rename": object()}
    for name, own in beams.items():
        monkeypatch.setattr(hadoopfilesystem.HadoopFileSystem, name, own)
    monkeypatch.setattr(boto3_client.Client, "__init__", beams_init := lambda self, o: None)
    monkeypatch.setattr(beam_filesystems, "_settled", False)
    monkeypatch.setattr(beam_filesystems, "_hdfs_refusal", "")
    for fix in (HDFS_FIX, S3_FIX):
        monkeypatch.setitem(VERIFIED_ON, fix, {**VERIFIED_ON[fix], "apache-beam": "9.99.0"})
    with caplog.at_level(logging.WARNING, logger=beam_filesystems.__name__):
        settle_beam_filesystems("s3://bucket/folder")
    assert [getattr(hadoopfilesystem.HadoopFileSystem, name) for name in beams] == list(
        beams.values()
    )
    assert boto3_client.Client.__init__ is beams_init
    assert len(caplog.records) == 2
    assert f"apache-beam {version('apache-beam')} (read against 9.99.0)" in caplog.text
    assert "a new boto3 client for every call" in caplog.text
    settle_beam_filesystems("/a/local/folder")
    with pytest.raises(UnverifiedBeam, match="hdfs:// paths are refused"):
        settle_beam_filesystems("hdfs://namenode/folder")


def _beams_own() -> dict[str, str]:
    """The source of each function in BEAMS_OWN, read from Beam's module files (the
    classes' own are replaced by now)."""
    sources = {}
    for module, cls, names in (
        (hadoopfilesystem, "HadoopFileSystem", ("_list", "rename", "_parse_url", "_join")),
        (boto3_client, "Client", ("__init__",)),
    ):
        text = inspect.getsource(module)
        found = next(
            node
            for node in parse(Path(inspect.getsourcefile(module))).body
            if isinstance(node, ast.ClassDef) and node.name == cls
        )
        sources.update(
            {
                f"{cls}.{node.name}": ast.get_source_segment(text, node)
                for node in found.body
                if isinstance(node, ast.FunctionDef) and node.name in names
            }
        )
    return sources


def _digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]
