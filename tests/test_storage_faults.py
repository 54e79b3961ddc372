"""Storage that fails at a steady rate, as buckets and web servers do under load (issue
32): a share of the reads answered 503, or cut half way through the body, by the fault
proxy in front of the GCS emulator and the S3 server, and by the test's web server for
image URLs. The run retries what can be retried and publishes output byte-identical to a
clean run's, every row accounted for; what a fault keeps failing is a dead letter, never
a half-written file."""

import dataclasses
import json
from pathlib import Path

import pytest
from conftest import download, encode, listing, output_digests, photo_like, put
from storage_servers import CUT, Behaviour, ImageServer

from image_tfrecords.pipeline import run

IMAGES = 16


def images() -> dict[str, bytes]:
    return {
        f"photo{i}.jpg": encode(photo_like(24 + i, 18 + i, seed=i), "JPEG") for i in range(IMAGES)
    }


def manifest_text(prefix: str) -> str:
    return "".join(
        f"{'test' if i % 4 == 3 else 'train'},{prefix}photo{i}.jpg,{'cat' if i % 2 else 'dog'}\n"
        for i in range(IMAGES)
    )


def convert(manifest: str, output: str, *flags: str) -> None:
    assert run.main(["--manifest", manifest, "--output_dir", output, *flags]) == 0


@dataclasses.dataclass(frozen=True)
class Clean:
    """The images and their manifest in `folder` of a bucket, converted into
    `folder`/clean with no fault, and that output downloaded to `local`."""

    folder: str
    local: Path


@pytest.fixture(scope="module")
def clean_runs(tmp_path_factory):
    """store -> its Clean, converted once for the module: every test here converts the
    same images, and compares its faulty run with this one (output_digests leaves each
    output's own folder out). The images and manifest are put for every test, as the
    `gcs` fixture empties its bucket. The proxy's record starts afresh after it."""
    made: dict[str, Clean] = {}

    def clean(store: str, bucket) -> Clean:
        folder = f"{bucket.url}/faults-{store}"
        for name, data in images().items():
            put(f"{folder}/img/{name}", data)
        put(f"{folder}/manifest.csv", manifest_text("img/").encode())
        if store not in made:
            convert(f"{folder}/manifest.csv", f"{folder}/clean", *bucket.flags)
            local = tmp_path_factory.mktemp(f"clean-{store}")
            download(f"{folder}/clean", local)
            made[store] = Clean(folder, local)
        bucket.proxy.reset()
        return made[store]

    return clean


@pytest.mark.parametrize("store", ["gcs", "s3"])
def test_a_steady_share_of_failed_and_cut_reads_changes_no_byte(
    store, request, tmp_path, clean_runs
):
    """20% of the image reads answered 503, 10% cut mid-body: the clients' retries
    (google-cloud-storage's, botocore's) get every image, and the output is a clean run's."""
    bucket = request.getfixturevalue(store)
    clean = clean_runs(store, bucket)
    folder = clean.folder
    # Anchored at the path's start: a shard's upload body names the images too.
    image_reads = r"^/[^?]*img(/|%2F)photo"
    bucket.proxy.fail(image_reads, 503, share=0.2, seed=1)
    bucket.proxy.fail(image_reads, CUT, share=0.1, seed=2)
    convert(f"{folder}/manifest.csv", f"{folder}/faulty", *bucket.flags)
    # Which requests a share hits varies with a GCS request's path (the object's
    # generation is in it); some always are.
    answered = bucket.proxy.statuses(image_reads)
    assert {503, CUT} & set(answered), answered
    download(f"{folder}/faulty", tmp_path / "faulty")
    assert output_digests(tmp_path / "faulty") == output_digests(clean.local)
    summary = json.loads((tmp_path / "faulty" / "summary.json").read_text())
    assert (summary["examples_written"], summary["accounted"]) == (IMAGES, True)


def test_image_urls_failing_at_a_steady_rate_change_no_byte(tmp_path):
    """A quarter of the GETs answered 503 (with Retry-After: 0), some stalled past the
    timeout once, one cut mid-body once: the retries get every image."""
    server = ImageServer({f"/img/{name}": data for name, data in images().items()})
    try:
        (tmp_path / "m.csv").write_text(manifest_text(f"{server.url}/img/"))
        convert(str(tmp_path / "m.csv"), str(tmp_path / "clean"))
        server.fault_share, server.fault_seed = 0.25, 3
        server.behaviours = {
            "/img/photo1.jpg": Behaviour(stall_s=1.5, times=1),
            "/img/photo2.jpg": Behaviour(cut=True, times=1),
        }
        convert(str(tmp_path / "m.csv"), str(tmp_path / "faulty"), "--download_timeout", "1")
        assert server.failed_by_share > 0
        assert output_digests(tmp_path / "faulty") == output_digests(tmp_path / "clean")
    finally:
        server.close()


@pytest.mark.parametrize("store", ["gcs", "s3"])
def test_a_steady_share_of_failed_writes_is_retried_or_the_run_publishes_nothing(
    store, request, tmp_path, clean_runs
):
    """15% of the requests on the output folder (uploads, copies into place, deletes,
    listings) answered 503: the run either retries them and publishes a clean run's
    bytes, or fails saying so with nothing published."""
    bucket = request.getfixturevalue(store)
    clean = clean_runs(store, bucket)
    # An output folder of its own, outside the clean run's (the share's draws hash the
    # requests' paths: these are the paths this test has always drawn on).
    output = f"{bucket.url}/write-faults-{store}/faulty"
    output_requests = r"write-faults-[a-z0-9]+(/|%2F)faulty"
    bucket.proxy.fail(output_requests, 503, share=0.15, seed=4)
    code = run.main(
        ["--manifest", f"{clean.folder}/manifest.csv", "--output_dir", output, *bucket.flags]
    )
    assert 503 in bucket.proxy.statuses(output_requests)
    bucket.proxy.reset()
    download(output, tmp_path / "faulty")
    if code == 0:
        assert output_digests(tmp_path / "faulty") == output_digests(clean.local)
    else:
        assert not (tmp_path / "faulty" / "summary.json").exists()
        assert not [
            path
            for path in (tmp_path / "faulty").rglob("*")
            if path.is_file() and ".tmp-" not in str(path)
        ]


@pytest.mark.parametrize("store", ["gcs", "s3"])
def test_shards_that_cannot_be_put_in_place_fail_the_run_and_it_never_looks_good(
    store, request, tmp_path, capsys, clean_runs
):
    """Every request on a TRAIN shard's final name refused (403: no client retries it) while
    a run replaces an earlier output: the run fails in one line saying why and what it
    left, the folder has no summary.json, so no reader takes it for an output. Then the
    deletes that end the renames refused: the same, with no file of the run left in the
    folder. A rerun with --resume publishes its own shards (not one of the earlier output
    that the failed swap moved back: the receipts would not match, and resume would write
    it again)."""
    bucket = request.getfixturevalue(store)
    clean = clean_runs(store, bucket)
    # The earlier output: the clean run's files, as downloaded, put (byte for byte, written
    # before this run) into a folder of this test's, which the run replaces.
    output = f"{bucket.url}/place-faults-{store}/clean"
    for file in clean.local.rglob("*"):
        if file.is_file():
            put(f"{output}/{file.relative_to(clean.local).as_posix()}", file.read_bytes())
    bucket.proxy.reset()
    # Without the first row (a TRAIN one): a new TRAIN shard, the same TEST shard.
    put(f"{clean.folder}/fewer.csv", "".join(manifest_text("img/").splitlines(True)[1:]).encode())
    argv = [
        "--manifest",
        f"{clean.folder}/fewer.csv",
        "--output_dir",
        output,
        "--overwrite",
        *bucket.flags,
    ]
    # S3 copies with a PUT on the final name; GCS copies to it in a batch request's body.
    bucket.proxy.fail(r"(^/[^?]*|(copyTo|rewriteTo)/b/[^/]+/o/[^ ?]*)clean(/|%2F)train-", 403)
    capsys.readouterr()
    assert run.main(argv) == run.EXIT_FAILED
    error = capsys.readouterr().err.splitlines()[-1]
    assert 403 in bucket.proxy.statuses(".")
    bucket.proxy.reset()
    assert error.startswith("error: the job failed: ") and "403" in error, error
    assert len(error) < 1000, error  # a failed batch in a line: not every file's error
    assert (
        f"After it: nothing was published, {output} has no summary.json (no "
        f"reader takes it for an output); the run's files are in {output}/.tmp-" in error
    )
    assert "summary.json" not in listing(output)
    earlier = output_digests(clean.local)

    # Resumed with the deletes that end each rename (a copy, then a delete) refused: the
    # copies landed under the final names, and the run removes them again, so no file of
    # this run stands in the folder (only what holds the earlier output's bytes may).
    bucket.proxy.fail(r"(<Key>|DELETE \S*/o/)[^<\s]*\.tmp-[^<\s]*train-", 403)
    assert run.main([*argv, "--resume"]) == run.EXIT_FAILED
    assert 403 in bucket.proxy.statuses(".")
    bucket.proxy.reset()
    assert "has no summary.json" in capsys.readouterr().err.splitlines()[-1]
    download(output, tmp_path / "left")
    left = output_digests(tmp_path / "left")
    assert "summary.json" not in left
    assert all(
        left[name] == earlier.get(name) for name in left if name.startswith(("train-", "test-"))
    ), (left, earlier)

    assert run.main([*argv, "--resume"]) == 0
    assert "resuming the stopped run" in capsys.readouterr().out
    download(output, tmp_path / "rerun")
    rerun = output_digests(tmp_path / "rerun")
    assert rerun.keys() == earlier.keys()
    for name in (name for name in rerun if name.startswith(("train-", "test-"))):
        assert (rerun[name] == earlier[name]) == name.startswith("test-"), name
    summary = json.loads((tmp_path / "rerun" / "summary.json").read_text())
    assert (summary["resumed_shards"], summary["examples_written"], summary["accounted"]) == (
        2,
        IMAGES - 1,
        True,
    )
