"""settle_beam_filesystems: Beam's HDFS listing and rename, and its S3 client, replaced
where the installed Beam has the shape each replacement relies on; on a Beam of another
shape, Beam's own left, one warning naming what differs, and hdfs:// refused.

Nothing here names a Beam version: the checks run on the Beam installed (CI's pinned one,
and the compatibility tier's), against Beam's own code. HDFS behaviour runs on a WebHDFS
client held in memory (the hdfs library's own, its requests answered here);
tests/test_cloud_storage.py runs both replacements against real servers."""

import ast
import inspect
import logging
import posixpath
import types
from pathlib import Path

import boto3
import hdfs
import pytest
from apache_beam.io import hadoopfilesystem
from apache_beam.io.aws.clients.s3 import boto3_client
from apache_beam.io.filesystem import BeamIOError
from apache_beam.options import pipeline_options
from apache_beam.options.pipeline_options import PipelineOptions
from hdfs.util import HdfsError
from source_trees import parse

from image_tfrecords.core.storage import beam_filesystems
from image_tfrecords.core.storage.beam_filesystems import (
    HdfsUnavailable,
    settle_beam_filesystems,
)

# As conftest.py does for every test; here too, so that this file runs alone (on a Beam
# whose other packages lack the suite's, with --noconftest).
settle_beam_filesystems()

HadoopFileSystem = hadoopfilesystem.HadoopFileSystem
REFUSED = "hdfs:// paths are refused"
SLOWER = "s3:// works as Beam's own, slower"


class _Tree(hdfs.InsecureClient):
    """The hdfs library's WebHDFS client over files held in memory: status, list, rename
    and delete answer as a NameNode does (a rename onto a file refused), and the library's
    own walk runs on them."""

    def __init__(self, *files: str) -> None:
        super().__init__("http://namenode.invalid:9870")
        self.kinds = {"/": "DIRECTORY"}
        for file in files:
            self.kinds[file] = "FILE"
            folder = posixpath.dirname(file)
            while folder not in self.kinds:
                self.kinds[folder] = "DIRECTORY"
                folder = posixpath.dirname(folder)

    def status(self, hdfs_path, strict=True):
        kind = self.kinds.get(posixpath.normpath(hdfs_path))
        if kind is None:
            if strict:
                raise HdfsError("File does not exist: %s", hdfs_path)
            return None
        return {"type": kind, "length": 3 * (kind == "FILE"), "modificationTime": 5000}

    def list(self, hdfs_path, status=False):
        folder = posixpath.normpath(hdfs_path)
        self.status(folder)
        children = sorted(p for p in self.kinds if p != "/" and posixpath.dirname(p) == folder)
        return [
            (posixpath.basename(child), self.status(child)) if status else posixpath.basename(child)
            for child in children
        ]

    def rename(self, hdfs_src_path, hdfs_dst_path):
        if hdfs_dst_path in self.kinds or hdfs_src_path not in self.kinds:
            raise HdfsError("Unable to rename %r to %r.", hdfs_src_path, hdfs_dst_path)
        for path in [
            p for p in self.kinds if p == hdfs_src_path or p.startswith(hdfs_src_path + "/")
        ]:
            self.kinds[hdfs_dst_path + path[len(hdfs_src_path) :]] = self.kinds.pop(path)

    def delete(self, hdfs_path, recursive=False, skip_trash=True):
        return self.kinds.pop(hdfs_path, None) is not None

    def files(self):  # (`list` is the method above, here)
        return sorted(path for path, kind in self.kinds.items() if kind == "FILE")


def _on(tree: _Tree, full_urls: bool = False) -> HadoopFileSystem:
    """A HadoopFileSystem as Beam makes one, its WebHDFS client `tree`."""
    made = HadoopFileSystem(
        {"hdfs_host": "namenode", "hdfs_port": 9870, "hdfs_user": "u", "hdfs_full_urls": full_urls}
    )
    made._hdfs_client = tree
    return made


def _beams_own(name: str):
    """Beam's own HadoopFileSystem.<name> (the class holds the replacement since conftest
    settled), compiled from Beam's module file with its module's names."""
    path = Path(inspect.getsourcefile(hadoopfilesystem))
    found = next(
        node
        for cls in parse(path).body
        if isinstance(cls, ast.ClassDef) and cls.name == "HadoopFileSystem"
        for node in cls.body
        if isinstance(node, ast.FunctionDef) and node.name == name
    )
    namespace = dict(vars(hadoopfilesystem))
    exec(compile(ast.Module(body=[found], type_ignores=[]), str(path), "exec"), namespace)
    return namespace[name]


@pytest.fixture
def beams_own(monkeypatch):
    """Beam's classes as Beam's own code left them, and nothing settled yet (each change
    undone after the test)."""
    monkeypatch.setattr(HadoopFileSystem, "_list", _beams_own("_list"))
    monkeypatch.setattr(HadoopFileSystem, "rename", _beams_own("rename"))
    monkeypatch.setattr(boto3_client, "boto3", boto3)
    monkeypatch.setattr(beam_filesystems, "_hdfs_refusal", None)


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_installed_beam_fits_both_and_each_is_installed_once(beams_own, caplog):
    with caplog.at_level(logging.WARNING, logger=beam_filesystems.__name__):
        settle_beam_filesystems("hdfs://folder/file")
    assert _warnings(caplog) == []
    assert HadoopFileSystem._list is beam_filesystems._list_every_file
    assert HadoopFileSystem.rename is beam_filesystems._rename_over_files
    shared = boto3_client.boto3
    assert isinstance(shared, beam_filesystems._SharedClients)
    beam_filesystems._hdfs_refusal = None  # settled again, as a test's reset would
    settle_beam_filesystems("hdfs://folder/file")
    assert boto3_client.boto3 is shared  # not wrapped twice
    assert _warnings(caplog) == []


def _other_list(self, url, limit):
    return iter(())


def _made_without_hdfs(self, pipeline_options):
    raise ImportError("Failed to import hdfs. You can ensure it is installed")


def _walk_of_old(self, hdfs_path, depth=0, status=False):
    return iter(())


def _parse_url_of_another_form(self, url):
    return url


@pytest.mark.parametrize(
    "owner, name, other, named",
    [
        (
            HadoopFileSystem,
            "_list",
            _other_list,
            "HadoopFileSystem._list has parameters (self, url, limit), expected (self, url)",
        ),
        (
            HadoopFileSystem,
            "__init__",
            _made_without_hdfs,
            "HadoopFileSystem could not be made from hdfs_host, hdfs_port and hdfs_user "
            "(ImportError: Failed to import hdfs.",
        ),
        (
            hdfs.InsecureClient,
            "walk",
            _walk_of_old,
            "HadoopFileSystem._hdfs_client (hdfs.client.InsecureClient).walk has parameters "
            "(hdfs_path, depth, status): got an unexpected keyword argument 'ignore_missing'",
        ),
        (
            HadoopFileSystem,
            "_parse_url",
            _parse_url_of_another_form,
            "HadoopFileSystem._parse_url('hdfs://a/b') gives 'hdfs://a/b', expected ('', '/a/b')",
        ),
    ],
    ids=["list-parameters", "no-hdfs-library", "walk-parameters", "parse-url-result"],
)
def test_a_beam_of_another_hdfs_shape_keeps_its_own_says_why_and_refuses_hdfs(
    beams_own, monkeypatch, caplog, owner, name, other, named
):
    monkeypatch.setattr(owner, name, other)
    beams_list, beams_rename = HadoopFileSystem._list, HadoopFileSystem.rename
    with caplog.at_level(logging.WARNING, logger=beam_filesystems.__name__):
        settle_beam_filesystems("s3://bucket/folder")
        settle_beam_filesystems("/a/local/folder")
    (warning,) = _warnings(caplog)  # once, at the first settle
    assert warning.startswith(REFUSED)
    assert named in warning
    assert "Beam " in warning.partition(named)[0]  # the Beam installed, named
    # Nothing half replaced: Beam's own listing and rename both stay.
    assert (HadoopFileSystem._list, HadoopFileSystem.rename) == (beams_list, beams_rename)
    assert isinstance(boto3_client.boto3, beam_filesystems._SharedClients)  # S3 unaffected
    with pytest.raises(HdfsUnavailable) as refused:
        settle_beam_filesystems("hdfs://namenode/folder")
    assert str(refused.value) == warning
    assert len(_warnings(caplog)) == 1


def test_a_beam_whose_s3_client_makes_its_boto3_client_otherwise_keeps_its_own(
    beams_own, monkeypatch, caplog
):
    def made_elsewhere(self, options):
        self.client = object()

    monkeypatch.setattr(boto3_client.Client, "__init__", made_elsewhere)
    with caplog.at_level(logging.WARNING, logger=beam_filesystems.__name__):
        settle_beam_filesystems("hdfs://folder/file")  # HDFS unaffected
    (warning,) = _warnings(caplog)
    assert warning.startswith(SLOWER)
    assert "boto3_client.Client.__init__ no longer uses boto3, session, Session" in warning
    assert boto3_client.boto3 is boto3
    assert HadoopFileSystem._list is beam_filesystems._list_every_file


def test_beams_own_hdfs_listing_and_rename_still_lose_a_runs_files():
    """Why the HDFS replacement exists, on the Beam installed; the day this fails, Beam's
    own list and rename as the others do, and core/storage/beam_filesystems.py's
    replacement can go."""
    tree = _Tree("/run/summary.json", "/run/temp/report.html")
    listed = [m.path for m in _beams_own("_list")(_on(tree), "hdfs://run")]
    # One level, the folder among the files: Beam's own listing changed if this fails.
    assert listed == ["hdfs://run/summary.json", "hdfs://run/temp"]
    with pytest.raises(BeamIOError, match="Unable to rename"):
        _beams_own("rename")(
            _on(tree), ["hdfs://run/temp/report.html"], ["hdfs://run/summary.json"]
        )


def test_every_file_below_a_folder_is_listed_none_below_a_missing_one_and_a_file_alone():
    files = ("/run/summary.json", "/run/temp/report.html", "/run/temp/a/b/c.tfrecord")
    ours = _on(_Tree(*files))
    listed = {
        m.path: (m.size_in_bytes, m.last_updated_in_seconds) for m in ours._list("hdfs://run")
    }
    assert listed == {f"hdfs:/{path}": (3, 5.0) for path in files}
    assert [m.path for m in ours._list("hdfs://run/temp/")] == [
        "hdfs://run/temp/report.html",
        "hdfs://run/temp/a/b/c.tfrecord",
    ]
    assert list(ours._list("hdfs://missing")) == []
    assert [m.path for m in ours._list("hdfs://run/summary.json")] == ["hdfs://run/summary.json"]
    # With --hdfs_full_urls, the server stays in every path listed.
    full = _on(_Tree(*files), full_urls=True)
    assert [m.path for m in full._list("hdfs://namenode/run/temp/a")] == [
        "hdfs://namenode/run/temp/a/b/c.tfrecord"
    ]


def test_a_listing_that_fails_is_beams_error_naming_the_url():
    class Failing(_Tree):
        def status(self, hdfs_path, strict=True):
            raise HdfsError("connection refused")

    with pytest.raises(BeamIOError, match="List operation failed") as failed:
        list(_on(Failing())._list("hdfs://run"))
    assert list(failed.value.exception_details) == ["hdfs://run"]


def test_a_rename_onto_a_file_replaces_it_and_failures_are_gathered_per_pair():
    tree = _Tree("/run/temp/summary.json", "/run/summary.json", "/run/temp/shard-0", "/run/x")
    ours = _on(tree)
    ours.rename(
        ["hdfs://run/temp/summary.json", "hdfs://run/temp/shard-0"],
        ["hdfs://run/summary.json", "hdfs://run/shard-0"],
    )
    assert tree.files() == ["/run/shard-0", "/run/summary.json", "/run/x"]
    with pytest.raises(BeamIOError, match="Rename operation failed") as failed:
        ours.rename(
            ["hdfs://run/missing", "hdfs://run/x"], ["hdfs://run/elsewhere", "hdfs://run/y"]
        )
    assert list(failed.value.exception_details) == [("hdfs://run/missing", "hdfs://run/elsewhere")]
    assert tree.files() == ["/run/shard-0", "/run/summary.json", "/run/y"]  # the other moved


class _Boto3:
    """boto3 as Beam's S3 client module uses it, counting the sessions and clients made."""

    def __init__(self) -> None:
        self.sessions, self.clients = [], []
        self.session = types.SimpleNamespace(Session=self._session)
        self.__version__ = "1.99"

    def _session(self, *args, **kwargs):
        self.sessions.append((args, kwargs))
        return types.SimpleNamespace(
            client=lambda *a, **k: self.clients.append((a, k)) or object(),
            region_name="eu",
        )


def test_one_boto3_client_per_set_of_arguments_and_a_session_only_to_make_one():
    fake = _Boto3()
    shared = beam_filesystems._SharedClients(fake)
    first = shared.session.Session().client(service_name="s3", region_name="eu", verify=None)
    again = shared.session.Session().client(region_name="eu", verify=None, service_name="s3")
    other = shared.session.Session().client(service_name="s3", region_name="us", verify=None)
    assert again is first and other is not first
    assert len(fake.clients) == len(fake.sessions) == 2
    # Arguments that cannot be a key: a client each time, as Beam's own.
    unkeyed = [shared.session.Session().client(service_name="s3", config=[1]) for _ in range(2)]
    assert unkeyed[0] is not unkeyed[1]
    # Anything else, boto3's own: a real session's attribute, boto3's names.
    assert shared.session.Session().region_name == "eu"
    assert shared.__version__ == "1.99"


def test_beams_s3_wrappers_share_the_client_of_their_settings_each_with_its_own_download(
    beams_own, monkeypatch
):
    """On Beam's own Client, with real boto3 clients (made offline): the same settings
    (from PipelineOptions or a dict) share one, other settings (--s3_*, and on a Beam
    that reads them, --aws_*) make another."""
    made = []
    real_client = boto3.session.Session.client
    monkeypatch.setattr(
        boto3.session.Session,
        "client",
        lambda *args, **kwargs: made.append(kwargs) or real_client(*args, **kwargs),
    )
    settle_beam_filesystems()
    flags = ["--s3_region_name", "eu-west-1", "--s3_endpoint_url", "http://127.0.0.1:9"]
    wrappers = [
        boto3_client.Client(PipelineOptions(flags)),
        boto3_client.Client(options=PipelineOptions(flags)),
        boto3_client.Client(
            {"s3_region_name": "eu-west-1", "s3_endpoint_url": "http://127.0.0.1:9"}
        ),
    ]
    assert len({id(wrapper.client) for wrapper in wrappers}) == 1 and len(made) == 1
    wrappers[0]._download_pos = 7  # a download's state stays the wrapper's own
    assert wrappers[1]._download_pos == 0
    other = {"eu-west-2": ["--s3_region_name", "eu-west-2", *flags[2:]]}
    if hasattr(pipeline_options, "AwsOptions"):  # Beam 2.78 on: --aws_* settings too
        other["eu-north-1"] = [*flags[2:], "--aws_region_name", "eu-north-1"]
    for region, other_flags in other.items():
        client = boto3_client.Client(PipelineOptions(other_flags)).client
        assert client is not wrappers[0].client
        assert client.meta.region_name == region
    assert len(made) == 1 + len(other)
