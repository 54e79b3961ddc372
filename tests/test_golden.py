"""Output bytes pinned: what the bundled samples convert to, file by file, in each kind of
run (label modes, file formats, compression, re-encoding, copies dropped, a folder).

The digests in golden/outputs.json were taken from the converter as it was before its
shard writing moved into worker processes (issue 30), so any change to the bytes it
writes shows here, named by configuration and file. The samples are read from the test's
S3 bucket at a fixed path: a shard holds its images' URIs, and their hashes choose each
image's shard and place, so local copies (whose absolute paths differ per machine) would
give other bytes on every checkout.

Where a change of output is meant, rewrite the digests with
`IMAGE_TFRECORDS_WRITE_GOLDEN=1 pytest tests/test_golden.py` and say why in the commit.
"""

import json
import os
from pathlib import Path

import pytest
from conftest import SAMPLE_DATA, convert, output_digests, put

GOLDEN = Path(__file__).parent / "golden" / "outputs.json"
ROOT = "golden"  # under the bucket
SAMPLES = [
    "manifest.csv",
    "detection.csv",
    "one_hot.csv",
    "extra_columns.csv",
    "images",
    "broken",
    "photo_folder",
]

# configuration -> its flags; {data} is where the samples are in the bucket.
CONFIGURATIONS = {
    "single_tfrecord": ["--manifest", "{data}/manifest.csv", "--num_shards", "2"],
    "single_array_record_near_dropped": [
        "--manifest",
        "{data}/manifest.csv",
        "--file_format",
        "array_record",
        "--dedupe",
        "near",
    ],
    "single_gzip_resized_png": [
        "--manifest",
        "{data}/manifest.csv",
        "--compression",
        "gzip",
        "--max_side",
        "40",
        "--image_format",
        "png",
        "--unseen_label",
        "oov",
    ],
    "detection": ["--manifest", "{data}/detection.csv", "--label_mode", "detection"],
    "multi_one_hot": [
        "--manifest",
        "{data}/one_hot.csv",
        "--label_mode",
        "multi",
        "--num_shards",
        "3",
    ],
    "extra_columns": [
        "--manifest",
        "{data}/extra_columns.csv",
        "--schema",
        str(SAMPLE_DATA / "extra_columns.schema.json"),
        "--image_format",
        "jpeg",
    ],
    "folder": ["--image_folder", "{data}/photo_folder"],
}


@pytest.fixture(scope="module")
def data(_s3_bucket):
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    FileSystems.set_options(PipelineOptions(_s3_bucket.flags))
    root = f"{_s3_bucket.url}/{ROOT}"
    for sample in SAMPLES:
        path = SAMPLE_DATA / sample
        for file in [path] if path.is_file() else sorted(path.rglob("*")):
            if file.is_file() and file.stat().st_size:  # Beam's S3 cannot write an empty one
                put(f"{root}/{file.relative_to(SAMPLE_DATA)}", file.read_bytes())
    return root, _s3_bucket.flags


@pytest.mark.parametrize("configuration", sorted(CONFIGURATIONS))
def test_the_samples_convert_to_the_pinned_bytes(configuration, data, tmp_path):
    assert_pinned(configuration, data, tmp_path)


def assert_pinned(configuration, data, tmp_path, *more_flags):
    root, bucket_flags = data
    flags = [flag.format(data=root) for flag in CONFIGURATIONS[configuration]]
    output = convert(
        tmp_path / "out", *flags, "--max_error_fraction", "0.5", *bucket_flags, *more_flags
    )
    found = output_digests(output)
    golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    if os.environ.get("IMAGE_TFRECORDS_WRITE_GOLDEN"):
        golden[configuration] = found
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
    expected = golden[configuration]
    assert sorted(found) == sorted(expected), "files written"
    assert {name: digest for name, digest in found.items() if expected[name] != digest} == {}


@pytest.mark.parametrize(
    "configuration, processes",
    [
        ("detection", "4"),
        ("multi_one_hot", "4"),
        ("single_array_record_near_dropped", "4"),
        ("single_gzip_resized_png", "4"),
        ("extra_columns", "2"),
        ("single_tfrecord", "0"),
    ],
)
def test_rows_in_many_chunks_and_shards_in_parts_give_the_pinned_bytes(
    configuration, processes, data, tmp_path, monkeypatch
):
    """Rows travel in chunks of ~3 lines here (a header read once, line numbers counted
    across chunks), parsed by worker processes or, with 0, in this one; and each shard is
    written in parts of 3 rows by the worker processes, then joined. One run for both:
    each changes how the work is cut, neither what is written."""
    from image_tfrecords.pipeline import resume, run
    from image_tfrecords.transforms import shards

    chunk_counts = []

    def scan_in_small_chunks(*arguments):
        scanned = resume.scan_sources(*arguments)
        chunk_counts.append(len(scanned.chunks))
        return scanned

    plan_split, plans = shards.plan_split, tmp_path / "plans"

    def recorded(rows, shard_count, workers):  # runs in a copy Beam unpickled: it writes a file
        plan = plan_split(rows, shard_count, workers)
        with plans.open("a") as file:
            file.write(f"{plan.parts}\n")
        return plan

    monkeypatch.setattr(resume, "chunk_bytes", lambda file_bytes, processes: 100)
    monkeypatch.setattr(run, "scan_sources", scan_in_small_chunks)
    monkeypatch.setattr(shards, "PART_ROWS", 3)
    monkeypatch.setattr(shards, "plan_split", recorded)
    assert_pinned(configuration, data, tmp_path, "--worker_processes", processes)
    assert chunk_counts[0] >= 6
    if processes != "0":  # parts are for worker processes to share a shard
        assert max(map(int, plans.read_text().split())) >= 2
