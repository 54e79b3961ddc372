"""The whole pipeline on buckets of real servers: gs:// (a GCS emulator), s3:// (moto), mixed.

Runs read their manifest and images from the bucket and write there, with the same
command as for local paths; outputs are read back and checked like the local end-to-end
test. Faults are injected by the proxy in front of each server (see storage_servers.py).
"""

import concurrent.futures
import json
import logging
import os
import pickle
import re
import subprocess
import sys
import time
from pathlib import Path

import apache_beam as beam
import boto3
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions
from conftest import (
    BUCKET,
    FILE_FORMATS,
    download,
    encode,
    feature,
    get,
    listing,
    photo_like,
    put,
    read_examples,
    shard_pattern,
    tiny_manifest,
)
from storage_servers import CUT, HOST, S3Server, free_port, object_pattern

from image_tfrecords.core.inputs.rows import resolve_uri
from image_tfrecords.core.inputs.sources import find_manifests
from image_tfrecords.core.records.chunks import RowChunk
from image_tfrecords.core.records.summary import RunInfo, RunOptions
from image_tfrecords.core.storage import storage
from image_tfrecords.pipeline import graph, run
from image_tfrecords.pipeline.options import ConvertOptions
from image_tfrecords.pipeline.storage_probe import PROBE_SECONDS, probe_storage
from image_tfrecords.pipeline.tft_storage import tensorflow_location_problem
from image_tfrecords.transforms.shards import mean_file_size

LABELS = ("cat", "dog")


def make_dataset(folder: str, manifest: str | None = None) -> dict[str, tuple[str, str, bytes]]:
    """Images under `folder`/img and a manifest naming them, plus a row for a missing image.

    The manifest is `folder`/manifest.csv with URIs relative to it, or `manifest` with
    absolute ones. Returns every stored image's URI -> (split, label, source bytes).
    """
    images = {f"photo{i}.jpg": encode(photo_like(24 + i, 18 + i, seed=i), "JPEG") for i in range(6)}
    images["palette.gif"] = encode(photo_like(20, 16, seed=9).quantize(32), "GIF")
    images["missing.jpg"] = None
    splits = ["train", "train", "train", "validation", "test", "train", "train", "train"]
    prefix = f"{folder}/img/" if manifest else "img/"
    expected, rows = {}, ["split,image_uri,label"]
    for i, (name, data) in enumerate(images.items()):
        rows.append(f"{splits[i]},{prefix}{name},{LABELS[i % 2]}")
        if data is not None:
            put(f"{folder}/img/{name}", data)
            expected[f"{folder}/img/{name}"] = (splits[i], LABELS[i % 2], data)
    put(manifest or f"{folder}/manifest.csv", ("\n".join(rows) + "\n").encode())
    return expected


def convert(manifest: str, output: str, *flags: str) -> int:
    return run.main(
        ["--manifest", manifest, "--output_dir", output, "--max_error_fraction", "0.5", *flags]
    )


def check_output(output: str, expected: dict, local, file_format: str = "tfrecord") -> dict:
    """Reads an output back from its bucket and checks it against the source images and
    the missing one; returns summary.json."""
    download(output, local)
    names = set(os.listdir(local))
    shards = {f"{split}-00000-of-00001.{file_format}" for split in ("train", "validation", "test")}
    # A TFRecord shard's index is published beside it, through the same bucket filesystem.
    indexes = {f"{shard}.idx" for shard in shards} if file_format == "tfrecord" else set()
    assert {
        *shards,
        *indexes,
        "transform_fn",
        "transformed_metadata",
        "summary.json",
        "errors-00000-of-00001.jsonl",
        "dataset_info.json",
        "features.json",
        "image.class.label.labels.txt",
        "report.html",
        "sources",
    } == names
    vocabulary = [w.decode() for w in tft.TFTransformOutput(str(local)).vocabulary_by_name("label")]
    seen = set()
    for split in ("train", "validation", "test"):
        for example in read_examples(shard_pattern(local, split)):
            uri = feature(example, "image/source_id").decode()
            want_split, label, source = expected[uri]
            assert split == want_split
            assert feature(example, "image/class/text").decode() == label
            assert vocabulary[feature(example, "image/class/label")] == label
            encoded = feature(example, "image/encoded")
            if uri.endswith(".jpg"):
                assert encoded == source
            else:  # the GIF, re-encoded as PNG with the same pixels
                assert np.array_equal(
                    tf.io.decode_image(encoded).numpy(),
                    tf.io.decode_image(source).numpy()[0][..., :3],
                )
            seen.add(uri)
    assert seen == set(expected)
    summary = json.loads((local / "summary.json").read_text())
    assert summary["accounted"] and summary["examples_written"] == len(expected)
    letters = [
        json.loads(line)
        for line in (local / "errors-00000-of-00001.jsonl").read_text().splitlines()
    ]
    folder = next(iter(expected)).rsplit("/", 1)[0]
    assert [(letter["uri"], letter["reason"]) for letter in letters] == [
        (f"{folder}/missing.jpg", "file_not_found")
    ]
    return summary


@pytest.mark.parametrize("file_format", FILE_FORMATS)
def test_gs_manifest_images_and_output(gcs, tmp_path, file_format):
    """ArrayRecord shards are written locally (the library opens local paths only) and
    copied to the bucket."""
    run_folder = f"{gcs.url}/gs-run-{file_format}"
    data, output = f"{run_folder}/data", f"{run_folder}/out"
    expected = make_dataset(data)
    assert convert(f"{data}/manifest.csv", output, "--file_format", file_format) == 0
    summary = check_output(output, expected, tmp_path, file_format)
    assert summary["manifests"] == [f"{data}/manifest.csv"]
    assert not [path for path in listing(run_folder) if ".tmp-" in path or "beam-temp" in path], (
        "temp objects left in the bucket"
    )


@pytest.mark.parametrize("file_format", FILE_FORMATS)
def test_s3_round_trip_survives_transient_server_errors(s3, tmp_path, file_format):
    """503 and 429 while an image is read are retried with backoff; every image arrives."""
    run_folder = f"{s3.url}/s3-run-{file_format}"
    data, output = f"{run_folder}/data", f"{run_folder}/out"
    expected = make_dataset(data)
    s3.proxy.reset()  # log only the run's requests
    s3.proxy.fail(object_pattern("photo0.jpg"), 503, times=2)
    s3.proxy.fail(object_pattern("photo1.jpg"), 429, times=2)
    assert convert(f"{data}/manifest.csv", output, "--file_format", file_format, *s3.flags) == 0
    check_output(output, expected, tmp_path, file_format)
    for name, status in (("photo0.jpg", 503), ("photo1.jpg", 429)):
        assert s3.proxy.statuses(object_pattern(name))[:3] == [status, status, 200]
    assert not [path for path in listing(run_folder) if ".tmp-" in path or "beam-temp" in path], (
        "temp objects left in the bucket"
    )


def test_s3_calls_share_one_boto3_client_per_set_of_options(s3, monkeypatch):
    """Beam's S3 filesystem made a boto3 client for every call (~0.16 s of CPU, 50 times
    a small image's read): reads, sizes, listings, copies and deletes, from any thread,
    now share one per set of S3 options, and four threads reading at once each still get
    their own bytes (each of Beam's wrappers keeps its own download)."""
    made = []
    real_client = boto3.session.Session.client
    monkeypatch.setattr(
        boto3.session.Session,
        "client",
        lambda *args, **kwargs: made.append(1) or real_client(*args, **kwargs),
    )
    # Options no other test uses: their client is made here.
    FileSystems.set_options(PipelineOptions([*s3.flags, "--s3_api_version", "2006-03-01"]))
    objects = {f"{s3.url}/kept/{i}.bin": os.urandom(1000 + i) for i in range(20)}
    for uri, data in objects.items():
        put(uri, data)

    def read_all(uris):
        return {uri: storage.open_read(uri).read() for uri in uris}

    assert read_all(objects) == objects
    with concurrent.futures.ThreadPoolExecutor(4) as threads:
        read = [threads.submit(read_all, list(objects)[i::4]) for i in range(4)]
        assert {uri: data for part in read for uri, data in part.result().items()} == objects
    sizes = [len(data) for data in objects.values()]
    assert mean_file_size(objects) == sum(sizes) / len(sizes)
    assert len(listing(f"{s3.url}/kept")) == 20
    FileSystems.rename([f"{s3.url}/kept/0.bin"], [f"{s3.url}/kept/moved.bin"])
    FileSystems.delete([f"{s3.url}/kept/moved.bin"])
    assert len(made) == 1
    FileSystems.set_options(
        PipelineOptions([*s3.flags, "--s3_api_version", "2006-03-01", "--s3_verify", "false"])
    )
    assert get(f"{s3.url}/kept/1.bin") == objects[f"{s3.url}/kept/1.bin"]
    assert len(made) == 2


def test_local_manifest_with_gs_image_uris(gcs, tmp_path):
    expected = make_dataset(f"{gcs.url}/local-manifest", str(tmp_path / "manifest.csv"))
    assert convert(str(tmp_path / "manifest.csv"), str(tmp_path / "out")) == 0
    check_output(str(tmp_path / "out"), expected, tmp_path / "read-back")


def test_gs_images_to_s3_output_show_no_credentials(gcs, s3, tmp_path):
    """The command line, as a user runs it: no key, secret or token in its output, its
    logs or any file it writes."""
    data, output = f"{gcs.url}/to-s3/data", f"{s3.url}/from-gs/out"
    expected = make_dataset(data)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "image_tfrecords",
            "--manifest",
            f"{data}/manifest.csv",
            "--output_dir",
            output,
            "--max_error_fraction",
            "0.5",
            *s3.flags,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "rows read 8 = 7 examples written + 1 dead-lettered" in result.stdout
    check_output(output, expected, tmp_path)
    for secret in gcs.secrets + s3.secrets:
        assert secret not in result.stdout + result.stderr
        for path in tmp_path.rglob("*"):
            assert path.is_dir() or secret.encode() not in path.read_bytes(), (secret, path)


def test_server_errors_mid_run_become_dead_letters_or_are_retried(gcs, tmp_path):
    """403 and 404 become dead letters with the status, and the run completes; a 503 is
    retried and its image arrives."""
    data, output = f"{gcs.url}/faults/data", f"{gcs.url}/faults/out"
    expected = make_dataset(data)
    gcs.proxy.reset()
    gcs.proxy.fail(object_pattern("photo0.jpg"), 503, times=2)
    gcs.proxy.fail(object_pattern("photo2.jpg"), 403)
    gcs.proxy.fail(object_pattern("photo3.jpg"), 404)
    assert convert(f"{data}/manifest.csv", output) == 0

    download(output, tmp_path)
    written = {
        feature(e, "image/source_id").decode(): feature(e, "image/encoded")
        for e in read_examples(f"{tmp_path}/*.tfrecord")
    }
    assert written[f"{data}/img/photo0.jpg"] == expected[f"{data}/img/photo0.jpg"][2]
    assert gcs.proxy.statuses(object_pattern("photo0.jpg"))[:3] == [503, 503, 200]
    letters = {
        letter["uri"].rsplit("/", 1)[1]: letter
        for letter in map(
            json.loads, (tmp_path / "errors-00000-of-00001.jsonl").read_text().splitlines()
        )
    }
    assert set(letters) == {"photo2.jpg", "photo3.jpg", "missing.jpg"}
    assert letters["photo2.jpg"]["reason"] == "read_error"
    assert letters["photo2.jpg"]["message"].startswith("HTTP 403: ")
    assert letters["photo3.jpg"]["reason"] == "file_not_found"
    assert letters["photo3.jpg"]["message"].startswith("HTTP 404: ")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["examples_written"] == len(expected) - 2 and summary["accounted"]


def test_overwrite_replaces_an_earlier_output_only_when_the_run_succeeds(gcs, tmp_path, capsys):
    data, output = f"{gcs.url}/overwrite/data", f"{gcs.url}/overwrite/out"
    make_dataset(data)
    assert convert(f"{data}/manifest.csv", output, "--num_shards", "2") == 0
    first = {path: get(f"{output}/{path}") for path in listing(output)}
    assert "train-00001-of-00002.tfrecord" in first
    assert convert(f"{data}/manifest.csv", output) == run.EXIT_USAGE  # not empty

    # The server refuses every upload: the run stops before the job, at its first write.
    gcs.proxy.fail(r"uploadType=resumable", 403)
    assert convert(f"{data}/manifest.csv", output, "--overwrite") == run.EXIT_USAGE
    gcs.proxy.reset()
    error = capsys.readouterr().err.splitlines()[-1]
    assert error.startswith(f"error: cannot use the storage: cannot write to {output}/.tmp-")
    assert "403" in error

    # The server refuses the shard uploads: the run fails before anything is published,
    # the earlier output stays whole, and tf.Transform's local working folder is gone.
    # The run has a temp folder of its own, so no other process's folder can show up.
    temp = tmp_path / "temp"
    temp.mkdir()
    gcs.proxy.fail(r'"name": ?"overwrite/out/\.tmp-[^"]*train-', 403)  # an upload's start
    assert (
        convert(f"{data}/manifest.csv", output, "--overwrite", "--temp_location", str(temp))
        == run.EXIT_FAILED
    )
    gcs.proxy.reset()
    error = capsys.readouterr().err.splitlines()[-1]
    assert error.startswith("error: the job failed: ") and "403" in error
    assert f"After it: nothing was published, {output} is as it was; " in error
    assert {
        path: get(f"{output}/{path}") for path in listing(output) if not path.startswith(".tmp-")
    } == first
    assert not list(temp.iterdir())

    # The server refuses to copy the shards to their final names (a rename, on GCS): the
    # run fails while publishing. summary.json went first, so no reader takes the folder
    # for an output; no shard of this run stands there (the copies that were made are
    # undone), and the earlier run's under the same names stay as they were.
    gcs.proxy.fail(r"copyTo/b/[^/]+/o/overwrite%2Fout%2Ftrain-", 403)
    assert (
        convert(f"{data}/manifest.csv", output, "--overwrite", "--num_shards", "1")
        == run.EXIT_FAILED
    )
    gcs.proxy.reset()
    assert f"{output} has no summary.json (no reader" in capsys.readouterr().err
    left = [path for path in listing(output) if not path.startswith(".tmp-")]
    assert "summary.json" not in left
    assert {path: get(f"{output}/{path}") for path in left if ".tfrecord" in path} == {
        path: data for path, data in first.items() if path in left and ".tfrecord" in path
    }

    assert convert(f"{data}/manifest.csv", output, "--overwrite", "--num_shards", "1") == 0
    replaced = [path for path in listing(output) if not path.startswith(".tmp-")]
    assert [p for p in replaced if p.startswith("train-")] == [
        "train-00000-of-00001.tfrecord",
        "train-00000-of-00001.tfrecord.idx",
    ]
    assert [p for p in replaced if p.startswith("transform_fn/")] == [
        p for p in first if p.startswith("transform_fn/")
    ]
    summary = json.loads(get(f"{output}/summary.json"))
    assert summary["options"]["num_shards"] == 1 and summary["accounted"]


# --- hdfs:// -------------------------------------------------------------------------------
# Against Hadoop's MiniDFSCluster (a NameNode and a DataNode in one JVM, with WebHDFS, as
# Beam's HDFS filesystem reaches a cluster), and with the WebHDFS address a port that
# nothing listens on.


@pytest.mark.parametrize("file_format", FILE_FORMATS)
def test_hdfs_manifest_images_and_output(hdfs_flags, tmp_path, file_format):
    """Into an output folder that does not exist yet, then (TFRecord) replacing it: Beam's
    HDFS filesystem refused the missing folder, and listed one level, so a run lost
    everything below it (the report, the transform_fn, the dead letters) with exit 0.

    Replacing is run once: a shard of either format reaches the temp folder in the first
    run (ArrayRecord's through a local file and a copy), and the publish step's renames over
    the earlier files (core/storage/beam_filesystems.py's _rename_over_files) never look at a file's
    format."""
    run_folder = f"hdfs://hdfs-run-{file_format}"
    data, output = f"{run_folder}/data", f"{run_folder}/out"
    expected = make_dataset(data)
    assert convert(f"{data}/manifest.csv", output, "--file_format", file_format, *hdfs_flags) == 0
    summary = check_output(output, expected, tmp_path / "first", file_format)
    if file_format == "tfrecord":
        assert (
            convert(
                f"{data}/manifest.csv",
                output,
                "--file_format",
                file_format,
                "--overwrite",
                *hdfs_flags,
            )
            == 0
        )
        summary = check_output(output, expected, tmp_path / "again", file_format)
    assert summary["manifests"] == [f"{data}/manifest.csv"]
    assert not [path for path in listing(run_folder) if ".tmp-" in path or "beam-temp" in path], (
        "temp files left in HDFS"
    )


def test_an_hdfs_image_folder_is_listed_to_its_last_level(hdfs_flags, tmp_path):
    """Splits and classes as sub-folders (Beam listed the first level alone): every image
    below them is found."""
    root = "hdfs://hdfs-folder/photos"
    names = {}
    for i in range(8):
        split, label = ("train", "validation")[i % 4 == 3], ("cat", "dog")[i % 2]
        names[f"{root}/{split}/{label}/photo{i}.jpg"] = (split, label)
        put(f"{root}/{split}/{label}/photo{i}.jpg", encode(photo_like(20 + i, 16, seed=i), "JPEG"))
    output = "hdfs://hdfs-folder/out"
    assert run.main(["--image_folder", root, "--output_dir", output, *hdfs_flags]) == 0
    download(output, tmp_path)
    seen = {
        feature(example, "image/source_id").decode(): (
            split,
            feature(example, "image/class/text").decode(),
        )
        for split in ("train", "validation")
        for example in read_examples(shard_pattern(tmp_path, split))
    }
    assert seen == names


def test_hdfs_options_reach_the_webhdfs_client(capsys):
    port = free_port()
    code = run.main(
        [
            "--manifest",
            "hdfs://datasets/pets/manifest.csv",
            "--output_dir",
            "hdfs://datasets/pets/tfrecords",
            "--hdfs_host",
            HOST,
            "--hdfs_port",
            str(port),
            "--hdfs_user",
            "trainer",
        ]
    )
    assert code == run.EXIT_USAGE
    error = capsys.readouterr().err
    assert error.startswith("error: cannot use the storage: ") and error.count("\n") == 1
    for sent in (
        f"host='{HOST}', port={port}",
        "/webhdfs/v1/datasets/pets/manifest.csv",
        "user.name=trainer",
    ):
        assert sent in error, sent


@pytest.mark.parametrize(
    "full_urls, manifest, image",
    [
        ([], "hdfs://datasets/pets/manifest.csv", "hdfs://datasets/pets/img/a.jpg"),
        (
            ["--hdfs_full_urls"],
            "hdfs://namenode/datasets/pets/manifest.csv",
            "hdfs://namenode/datasets/pets/img/a.jpg",
        ),
    ],
)
def test_hdfs_image_uris_resolve_against_the_manifest_folder(full_urls, manifest, image):
    FileSystems.set_options(
        PipelineOptions(
            [
                "--hdfs_host",
                HOST,
                "--hdfs_port",
                str(free_port()),
                "--hdfs_user",
                "trainer",
                *full_urls,
            ]
        )
    )
    folder = FileSystems.split(manifest)[0]
    assert resolve_uri("img/a.jpg", folder) == image
    assert resolve_uri("hdfs://elsewhere/b.jpg", folder) == "hdfs://elsewhere/b.jpg"


# --- fail fast on storage -------------------------------------------------------------------
# Before the job, the launcher reads the first images of each remote scheme with one short
# deadline (pipeline/storage_probe.py). Each case here took minutes of retries before.


def stops_fast(argv, capsys, uri):
    """Runs the command line; asserts it stopped in seconds with one line naming `uri`.
    Returns that line."""
    started = time.monotonic()
    assert run.main(argv) == run.EXIT_USAGE
    assert time.monotonic() - started < PROBE_SECONDS + 5
    error = capsys.readouterr().err
    assert error.startswith(f"error: cannot use the storage: {uri}: ") and error.count("\n") == 1
    return error


def image_manifest(tmp_path, *uris):
    (tmp_path / "m.csv").write_text("".join(f"train,{uri},cat\n" for uri in uris))
    return ["--manifest", str(tmp_path / "m.csv"), "--output_dir", str(tmp_path / "out")]


def test_a_bucket_that_does_not_exist_stops_the_run(gcs, tmp_path, capsys):
    uri = "gs://no-such-bucket/img/a.jpg"
    error = stops_fast(image_manifest(tmp_path, uri, "gs://no-such-bucket/img/b.jpg"), capsys, uri)
    assert "cannot list gs://no-such-bucket/: " in error and "404" in error


def test_a_forbidden_bucket_stops_the_run_with_the_status(gcs, tmp_path, capsys):
    put(f"{gcs.url}/forbidden/a.jpg", encode(photo_like(8, 8, 1), "JPEG"))
    gcs.proxy.fail(object_pattern("forbidden/a.jpg"), 403)
    error = stops_fast(
        image_manifest(tmp_path, f"{gcs.url}/forbidden/a.jpg"), capsys, f"{gcs.url}/forbidden/a.jpg"
    )
    assert "HTTP 403" in error or "403 GET" in error


def test_an_unreachable_gcs_host_stops_the_run_naming_what_the_client_retries(
    gcs, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://{HOST}:{free_port()}")
    uri = f"{gcs.url}/img/a.jpg"
    error = stops_fast(image_manifest(tmp_path, uri), capsys, uri)
    assert f"no answer within {PROBE_SECONDS:g} s; the client retries: " in error
    assert "Connection refused" in error or "ConnectionError" in error
    # The client's line whole, however long its URL (google-api-core's "Retrying due
    # to ..., sleeping 0.6s ..."): not cut mid-word.
    assert re.search(r", sleeping \d+\.\ds \.\.\.$", error.rstrip("\n")), error


def test_an_unreachable_output_bucket_stops_the_run_before_any_listing_hangs(
    gcs, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://{HOST}:{free_port()}")
    stops_fast(
        ["--manifest", tiny_manifest(tmp_path), "--output_dir", f"{gcs.url}/out"],
        capsys,
        f"{gcs.url}/out/",
    )


def test_a_stopped_s3_server_stops_the_run(tmp_path, capsys):
    server = S3Server()
    server.create_bucket(BUCKET)
    server.stop()
    uri = f"s3://{BUCKET}/img/a.jpg"
    stops_fast(
        [
            *image_manifest(tmp_path, uri),
            "--s3_endpoint_url",
            server.url,
            "--s3_region_name",
            "us-east-1",
            "--s3_access_key_id",
            "AKIAPROBE",
            "--s3_secret_access_key",
            "probe",
        ],
        capsys,
        uri,
    )


@pytest.mark.parametrize("fault", [503, CUT])
def test_a_bucket_that_answers_but_keeps_failing_a_read_does_not_stop_the_run(fault, gcs, caplog):
    """Past the deadline the client still retries, but the bucket answered: it is busy, not
    unreachable (CI's run with 10% of reads cut drew three cuts in a row on the first
    image). The run goes on with a warning; the job's reads retry as well."""
    uri = f"{gcs.url}/busy/a.jpg"
    put(uri, b"x" * 4096)
    gcs.proxy.fail(object_pattern("busy/a.jpg"), fault)
    started = time.monotonic()
    probe_storage([uri], seconds=2)
    assert time.monotonic() - started < 4
    # A cut read resumes where it was cut (a ranged GET, answered 206), each cut halving
    # what is left, until the last byte, which cannot be cut (the client may get that far
    # while this test looks).
    answered = set(gcs.proxy.statuses(object_pattern("busy/a.jpg")))
    assert fault in answered and answered <= {fault, 206}, answered
    (warning,) = (
        record.getMessage() for record in caplog.records if record.levelno == logging.WARNING
    )
    assert warning.startswith(
        f"{uri}: the storage answers, but had not given the file after 2 s (the client retries: "
    )


def test_missing_files_in_a_bucket_that_exists_are_no_storage_problem(gcs, s3):
    """They become file_not_found dead letters in the job, as before; the probe goes on
    to the next file of the scheme and stops at the first it reads."""
    put(f"{s3.url}/probe/there.jpg", b"x")
    put(f"{gcs.url}/probe/other.jpg", b"x")  # the bucket holds a file, not these
    gcs.proxy.reset()
    probe_storage(
        [
            f"{gcs.url}/probe/first-missing.jpg",
            f"{gcs.url}/probe/also-missing.jpg",
            f"{s3.url}/probe/missing.jpg",
            f"{s3.url}/probe/there.jpg",
            f"{s3.url}/probe/never-read.jpg",
            "/local/paths/are/not/probed.jpg",
        ]
    )
    assert gcs.proxy.statuses(object_pattern("first-missing.jpg"))[:1] == [404]
    assert gcs.proxy.statuses(object_pattern("also-missing.jpg"))[:1] == [404]
    assert s3.proxy.statuses(object_pattern("never-read.jpg")) == []


def test_the_size_estimate_stats_its_sample_at_once_within_a_bound(gcs, tmp_path, monkeypatch):
    """32 files on a host that does not answer cost the bound once, not 32 retry loops;
    the files that answered make the estimate."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://{HOST}:{free_port()}")
    for name, size in (("a.jpg", 100), ("b.jpg", 300)):
        (tmp_path / name).write_bytes(b"x" * size)
    sample = [
        str(tmp_path / "a.jpg"),
        str(tmp_path / "b.jpg"),
        str(tmp_path / "missing.jpg"),
        *(f"{gcs.url}/unreachable/{i}.jpg" for i in range(32)),
    ]
    started = time.monotonic()
    assert mean_file_size(sample, seconds=2) == 200
    assert time.monotonic() - started < 4


def no_google_credentials(**extra):
    """The environment of a user with no Google credentials at all (nor gcloud's)."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ("GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST")
    }
    home = extra.pop("home")
    return {**env, "HOME": home, "CLOUDSDK_CONFIG": home, **extra}


def test_an_emulator_needs_no_credentials(gcs, tmp_path):
    """A new process with STORAGE_EMULATOR_HOST and no credentials reads and writes gs://
    at once: before, Beam's ~20 s credential search outlasted the storage probe."""
    put(f"{gcs.url}/anonymous/a.jpg", encode(photo_like(16, 12, 1), "JPEG"))
    put(f"{gcs.url}/anonymous/m.csv", b"train,a.jpg,cat\n")
    (tmp_path / "home").mkdir()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "image_tfrecords",
            "--manifest",
            f"{gcs.url}/anonymous/m.csv",
            "--output_dir",
            f"{gcs.url}/anonymous/out",
        ],
        env=no_google_credentials(
            home=str(tmp_path / "home"), STORAGE_EMULATOR_HOST=os.environ["STORAGE_EMULATOR_HOST"]
        ),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(get(f"{gcs.url}/anonymous/out/summary.json"))
    assert summary["examples_written"] == 1


@pytest.mark.parametrize("credentials, anonymous", [(False, True), (True, False)])
def test_without_credentials_gcs_is_read_anonymously_at_once(credentials, anonymous, tmp_path):
    """With no Google credentials (and no emulator) Beam's client is set to connect
    anonymously, for public buckets, instead of searching ~20 s; with credentials Beam
    finds them itself as before. Each case in a new process, as a user's run is."""
    home = tmp_path / "home"
    home.mkdir()
    extra = {"home": str(home), "NO_GCE_CHECK": "true"}
    if credentials:
        adc = tmp_path / "adc.json"
        adc.write_text(
            json.dumps(
                {
                    "type": "authorized_user",
                    "client_id": "x",
                    "client_secret": "y",
                    "refresh_token": "z",
                }
            )
        )
        extra["GOOGLE_APPLICATION_CREDENTIALS"] = str(adc)
    script = (
        "from image_tfrecords.core.storage.gcs_access import (\n"
        "    read_anonymously, settle_gcs_credentials)\n"
        "from apache_beam.internal.gcp.auth import _Credentials\n"
        "settle_gcs_credentials()\n"
        "print(read_anonymously(), _Credentials._credentials_init)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=no_google_credentials(**extra),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parent.parent,
    )
    assert done.stdout.split() == [str(anonymous), str(anonymous)], done.stderr[-2000:]


# A worker of a plain Beam worker pool (worker_pool_main, EXTERNAL): its SDK harness never
# gave Beam's filesystems the job's options, and its environment holds S3's keys.
_BARE_POOL_WORKER = """
import dataclasses, pickle, sys
from apache_beam.io.filesystems import FileSystems
from image_tfrecords.transforms.in_workers import RunInWorkers
from image_tfrecords.core.inputs.rows import RowRules
from image_tfrecords.core.records.workers import Workers
from image_tfrecords.core.worker.row_tasks import SurveyTask

class Survey(RunInWorkers):  # the base every task-running DoFn's setup() is
    def task(self, chunk):
        return SurveyTask(chunk, RowRules(), 4, ())
    def outputs(self, survey):
        yield survey.rows_read

settings, chunk = pickle.loads(sys.stdin.buffer.read())
for processes in (1, 0):  # a worker process, then the DoFn's own process
    FileSystems._pipeline_options = None
    survey = Survey(dataclasses.replace(settings, workers=Workers(processes)))
    survey.setup()
    survey.start_bundle()
    read = [*survey.process(chunk), *(v.value for v in survey.finish_bundle())]
    survey.teardown()
    print(processes, read)
"""


def test_a_bare_worker_pools_dofns_reach_s3_with_the_jobs_options_less_its_keys(s3, tmp_path):
    """The job's S3 endpoint and region travel in RunSettings (pickled into the graph, so
    without the keys); a DoFn's setup() gives them to Beam before any storage is touched,
    and its worker processes get them too."""
    put(f"{s3.url}/bare/manifest.csv", b"split,image_uri,label\ntrain,a.jpg,cat\ntest,b.jpg,dog\n")
    options = PipelineOptions([*s3.flags, "--output_dir", str(tmp_path / "out")])
    settings = options.view_as(ConvertOptions).run_settings()
    assert b"s3_endpoint_url" in pickle.dumps(settings)
    assert s3.secrets[1].encode() not in pickle.dumps(settings)
    (chunk,) = [RowChunk(source) for source in find_manifests([f"{s3.url}/bare/manifest.csv"])]
    printed = _as_a_bare_pool_worker(s3, _BARE_POOL_WORKER, (settings, chunk))
    assert printed.split("\n")[:2] == ["1 [2]", "0 [2]"]


def _as_a_bare_pool_worker(s3, script: str, given: object) -> str:
    """What `script` printed, run in a process like a bare worker pool's worker: S3's keys
    in its environment, and `given` pickled on its stdin."""
    key_id, secret = s3.secrets
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=pickle.dumps(given),
        capture_output=True,
        timeout=60,
        cwd=Path(__file__).parent.parent,
        env={**os.environ, "AWS_ACCESS_KEY_ID": key_id, "AWS_SECRET_ACCESS_KEY": secret},
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return done.stdout.decode()


# The two steps of WriteSortedLines, each with Beam's filesystems given no options first:
# a DoFn that touches storage (StorageDoFn) and a Map's function (with_filesystems).
_BARE_SORTED_LINES = """
import pickle, sys
from apache_beam.io.filesystems import FileSystems
from image_tfrecords.transforms import sorted_lines
from image_tfrecords.transforms.storage_steps import with_filesystems

filesystems, path, temp_dir = pickle.loads(sys.stdin.buffer.read())
FileSystems._pipeline_options = None
runs = sorted_lines._WriteSortedRuns(path, str, lambda line: line, temp_dir, filesystems)
runs.setup()
runs.start_bundle()
for line in ("b", "a"):
    list(runs.process(line))
written = [value.value for value in runs.finish_bundle()]
FileSystems._pipeline_options = None
print(*with_filesystems(sorted_lines._merge_runs, filesystems)(written, path, temp_dir))
"""


def test_a_bare_worker_pools_storage_steps_outside_the_task_runners_reach_s3(s3, tmp_path):
    """Not only RunInWorkers: a step that writes storage itself (here the sorted lines'
    runs and their merge; the graph's others are checked in the next test) applies the
    job's options first."""
    options = PipelineOptions([*s3.flags, "--output_dir", str(tmp_path / "out")])
    filesystems = options.view_as(ConvertOptions).run_settings().filesystems
    path = f"{s3.url}/bare-lines/errors-00000-of-00001.jsonl"
    printed = _as_a_bare_pool_worker(
        s3, _BARE_SORTED_LINES, (filesystems, path, f"{s3.url}/bare-lines/tmp")
    )
    assert printed.split() == [path]
    assert get(path) == b"a\nb\n"


def test_a_temp_location_tensorflow_cannot_write_is_refused_before_anything_is_made(
    s3, tmp_path, capsys
):
    """tf.Transform writes --temp_location through TensorFlow's filesystems, which have no
    s3://: the run made its folders in the bucket, then failed in the analysis."""
    temp = f"{s3.url}/tft-temp"
    assert (
        convert(tiny_manifest(tmp_path), str(tmp_path / "out"), *s3.flags, "--temp_location", temp)
        == 2
    )
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        f"error: --temp_location {temp}: tf.Transform writes its working files "
        "there through TensorFlow's filesystems, which cannot write s3:// here; "
        "give a local folder (on a cluster, a mount every worker shares) or gs://..."
    )
    assert listing(temp) == [] and not (tmp_path / "out").exists()
    assert {
        tensorflow_location_problem("temp_location", where)
        for where in (None, str(tmp_path), f"file://{tmp_path}", "gs://bucket/temp")
    } == {None}
    assert "cannot write ram://" in tensorflow_location_problem("temp_location", "ram://t")


# The graph's steps that read or write storage, by their label (less the ParDo's own of
# a ParDo with outputs); each must apply the job's filesystem options first.
_STORAGE_STEPS = {
    "SurveyRows/Survey",
    "PackRows/Pack",
    "PlanShards/MeanFileSize",
    "WriteShards/LoadAndWrite",
    "Duplicates/FindNear/CloseEarlier",
    "Duplicates/FindNear/CopyRefs",
    "Duplicates/FindNear/Pairs",
    "Duplicates/Drop/Rewrite",
    "ReportContent/ReadThumbnails",
    *(
        f"{writer}/{step}"
        for writer in ("Duplicates/Write", "Duplicates/WriteNear", "WriteDeadLetters")
        for step in ("SortedRuns", "Merge")
    ),
    "Publish/Publish",
}


def _applied_filesystems(fn: beam.DoFn) -> object:
    """The options a step applies: a StorageDoFn's, or those of the function a Map,
    FlatMap or MapTuple calls (Beam's Map and MapTuple call it from a lambda of theirs)."""
    if not isinstance(fn, beam.transforms.core.CallableWrapperDoFn):
        return getattr(fn, "_filesystems", None)
    closure = getattr(fn._fn, "__closure__", None) or ()
    called = [fn._fn, *(cell.cell_contents for cell in closure)]
    return next((f.filesystems for f in called if hasattr(f, "filesystems")), None)


def test_every_step_of_the_graph_that_touches_storage_applies_the_jobs_options(s3, tmp_path):
    """The whole graph, built (not run) for a bucket: each storage step is a StorageDoFn
    or a Map's function wrapped by with_filesystems, given the job's options."""
    put(f"{s3.url}/graph/manifest.csv", b"split,image_uri,label\ntrain,a.jpg,cat\n")
    options = PipelineOptions(
        [*s3.flags, "--output_dir", f"{s3.url}/graph/out", "--dedupe", "near"]
    )
    convert = options.view_as(ConvertOptions)
    expected = convert.run_settings().filesystems
    assert expected.values
    applying: dict[str, bool] = {}

    class Steps(beam.pipeline.PipelineVisitor):
        def visit_transform(self, applied):
            if isinstance(applied.transform, beam.ParDo):
                step = re.sub(r"/ParDo\(\w+\)$", "", applied.full_label)
                applied_here = _applied_filesystems(applied.transform.fn) == expected
                applying[step] = applying.get(step, True) and applied_here

    chunks = [RowChunk(source) for source in find_manifests([f"{s3.url}/graph/manifest.csv"])]
    p = beam.Pipeline(options=options)
    graph.build(
        p,
        convert,
        graph.JobInputs(
            convert.run_settings(),
            tuple(chunks),
            RunInfo(
                options=RunOptions(compression="none", label_mode="single", unseen_label="error")
            ),
        ),
        graph.JobFolders(f"{s3.url}/graph/out/.tmp-run", str(tmp_path / "tft")),
    )
    p.visit(Steps())
    assert {step: applying.get(step) for step in _STORAGE_STEPS} == dict.fromkeys(
        _STORAGE_STEPS, True
    )
