"""`image-tfrecords verify`: a sound output passes; each kind of damage is caught and named."""

import json
import os
import struct
import subprocess
import sys

import pytest
from conftest import copy_output, encode, photo_like, rewrite_records, shard_files, shard_records

from image_tfrecords.core.records.failure import Failure
from image_tfrecords.core.records.naming import failure_record, staged_dir, staged_report, temp_dir
from image_tfrecords.core.records.summary import RunOptions, Summary
from image_tfrecords.output import output_folder
from image_tfrecords.pipeline.cli import report_main, verify_main

SHARD = "train-00001-of-00002.tfrecord"  # in tfrecord_output


def record_offsets(path):
    """Where each record of a TFRecord file starts, read from its length fields."""
    data, offsets, offset = path.read_bytes(), [], 0
    while offset < len(data):
        offsets.append(offset)
        offset += 16 + struct.unpack_from("<Q", data, offset)[0]
    return offsets


def damaged(output, tmp_path):
    return copy_output(output, tmp_path / "out")


def verify(output, capsys):
    code = verify_main([str(output)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_a_sound_output_passes_from_the_command_line(sample_output):
    command = os.path.join(os.path.dirname(sys.executable), "image-tfrecords")
    result = subprocess.run(
        [command, "verify", str(sample_output)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    # Up to 2 per split: a row's shard is a hash of its absolute path, so where the
    # checkout lies decides whether a split's 6 images all fall in one of its 2 shards.
    shards = len(shard_files(sample_output))
    assert 3 <= shards <= 6
    assert f"ok: 43 examples in {shards} shards (train 31, validation 6, test 6)" in result.stdout


@pytest.mark.parametrize("fixture", ["gzip_output", "multi_label_output", "boxes_output"])
def test_gzip_multi_label_and_detection_outputs_pass(fixture, request, capsys):
    assert verify(request.getfixturevalue(fixture), capsys)[0] == 0


def test_a_truncated_shard_is_named_with_the_record_it_cuts(tfrecord_output, tmp_path, capsys):
    output = damaged(tfrecord_output, tmp_path)
    shard = output / SHARD
    offsets = record_offsets(shard)
    shard.write_bytes(shard.read_bytes()[: offsets[3] + 100])
    code, text = verify(output, capsys)
    assert code == 1
    assert f"{SHARD}: record 3 (byte {offsets[3]}): truncated" in text


@pytest.mark.parametrize("where, reason", [(20, "data CRC mismatch"), (2, "length CRC mismatch")])
def test_a_flipped_bit_is_caught_by_the_crc(tfrecord_output, tmp_path, capsys, where, reason):
    output = damaged(tfrecord_output, tmp_path)
    shard = output / SHARD
    offsets = record_offsets(shard)
    data = bytearray(shard.read_bytes())
    data[offsets[2] + where] ^= 0x10
    shard.write_bytes(bytes(data))
    code, text = verify(output, capsys)
    assert code == 1 and f"{SHARD}: record 2 (byte {offsets[2]}): {reason}" in text


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_damaged_gzip_shard_is_caught(gzip_output, tmp_path, capsys, damage):
    output = damaged(gzip_output, tmp_path)
    shard = output / "train-00000-of-00001.tfrecord.gz"
    data = bytearray(shard.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    code, text = verify(output, capsys)
    assert code == 1 and "train-00000-of-00001.tfrecord.gz: record " in text


def test_a_damaged_array_record_shard_is_caught_by_its_chunk_hashes(
    sample_outputs, tmp_path, capsys
):
    output = damaged(sample_outputs("array_record"), tmp_path)
    shard = shard_files(output, "train")[1]
    data = shard.read_bytes()
    # Record 2's image data: the file holds each record's bytes as they are (uncompressed).
    record = shard_records(shard)[2]
    start = data.index(record) + len(record) // 2
    shard.write_bytes(data[:start] + bytes([data[start] ^ 0x10]) + data[start + 1 :])
    code, text = verify(output, capsys)
    assert code == 1 and f"{shard.name}: record 2: " in text and "hash mismatch" in text
    shard.write_bytes(data[: len(data) // 2])
    code, text = verify(output, capsys)
    assert code == 1 and f"{shard.name}: record 0: not a readable ArrayRecord file" in text


def test_counts_are_checked_against_summary_json(sample_output, tmp_path, capsys):
    output = damaged(sample_output, tmp_path)
    summary = json.loads((output / "summary.json").read_text())
    summary["splits"]["train"]["shards"][0]["records"] += 1
    (output / "summary.json").write_text(json.dumps(summary))
    code, text = verify(output, capsys)
    records = summary["splits"]["train"]["shards"][0]["records"]
    shard = shard_files(output, "train")[0].name
    assert code == 1
    assert f"{shard}: {records - 1} records, summary.json says {records}" in text


def test_missing_and_unlisted_shards_are_named(sample_output, tmp_path, capsys):
    output = damaged(sample_output, tmp_path)
    shard = shard_files(output, "train")[1]
    shard.unlink()
    assert f"{shard.name}: listed in summary.json but missing" in verify(output, capsys)[1]
    stray = shard.name.replace("-of-00002", "-of-00003")
    (output / stray).write_bytes(b"")
    assert f"{stray}: a shard file summary.json does not list" in verify(output, capsys)[1]


def test_a_shard_index_that_disagrees_with_its_shard_or_is_missing_is_named(
    tfrecord_output, tmp_path, capsys
):
    output = damaged(tfrecord_output, tmp_path)
    index = output / f"{SHARD}.idx"
    starts = record_offsets(output / SHARD)
    ends = starts[1:] + [(output / SHARD).stat().st_size]
    lines = index.read_text().splitlines()
    # tfrecord2idx's format: where each record starts, and its bytes with the framing.
    assert lines == [f"{start} {end - start}" for start, end in zip(starts, ends)]
    index.write_text("\n".join(lines[:2] + ["0 16"] + lines[3:]) + "\n")
    code, text = verify(output, capsys)
    assert code == 1
    assert f"{SHARD}.idx: line 3 is '0 16', the record there is '{lines[2]}'" in text
    index.write_text("\n".join(lines[:-1]) + "\n")
    assert (
        f"{SHARD}.idx: {len(lines) - 1} lines for {len(lines)} records" in verify(output, capsys)[1]
    )
    index.unlink()
    assert f"{SHARD}.idx: listed in summary.json but missing" in verify(output, capsys)[1]


def set_feature(key, kind, value, record=1):
    """A change for rewrite_records: `key` of one record gets `value`."""

    def change(index, example):
        if index == record:
            values = getattr(example.features.feature[key], kind).value
            del values[:]
            values.extend(value)

    return change


@pytest.mark.parametrize(
    "key, kind, value, problem",
    [
        (
            "image/class/label",
            "int64_list",
            [3],
            "image/class/label 3 is outside the vocabulary (ids 0..2)",
        ),
        ("image/class/label", "int64_list", [-1], "image/class/label -1 is outside"),
        ("image/class/text", "bytes_list", [b"dog"], "image/class/text says 'dog'"),
        ("image/encoded", "bytes_list", [b"\xff\xd8 not a JPEG"], "image/encoded does not decode"),
        (
            "image/encoded",
            "bytes_list",
            [encode(photo_like(7, 5, 0), "PNG")],
            "image/encoded decodes with height 5, image/height says",
        ),
        ("image/height", "int64_list", [1, 2], "not an example of the features summary.json lists"),
    ],
)
def test_examples_that_contradict_themselves_or_the_vocabulary_are_named(
    sample_output, tmp_path, capsys, key, kind, value, problem
):
    output = damaged(sample_output, tmp_path)
    shard = shard_files(output, "train")[1]
    rewrite_records(shard, set_feature(key, kind, value))  # the CRCs and hashes stay valid
    code, text = verify(output, capsys)
    assert code == 1 and f"{shard.name}: record 1: " in text and problem in text


def test_the_image_must_match_its_sha256(sample_output, tmp_path, capsys):
    output = damaged(sample_output, tmp_path)
    rewrite_records(
        shard_files(output, "train")[1], set_feature("image/key/sha256", "bytes_list", [b"0" * 64])
    )
    assert "image/encoded does not match image/key/sha256" in verify(output, capsys)[1]


def test_detection_ids_are_one_based(boxes_output, tmp_path, capsys):
    output = damaged(boxes_output, tmp_path)
    shard = next(output.glob("train-*.tfrecord"))
    records = len(record_offsets(shard))
    rewrite_records(
        shard, set_feature("image/object/class/label", "int64_list", [0], record=records - 1)
    )
    text = verify(output, capsys)[1]
    assert "image/object/class/label 0 is outside the vocabulary (ids 1..2)" in text


def test_a_folder_without_summary_json_or_with_one_without_features_is_an_error(tmp_path, capsys):
    """A folder that is no output is a usage error (exit 2); a bad summary.json exit 1."""
    code, text = verify(tmp_path, capsys)
    assert code == 2 and "summary.json not found: not an image-tfrecords output" in text
    older = json.loads(
        Summary(
            options=RunOptions(),
            rows_read=0,
            examples_written=0,
            rows_in_examples=0,
            rows_dead_lettered=0,
            accounted=True,
            error_fraction=0.0,
            splits={},
            vocabulary={"label": []},
        ).to_json()
    )
    del older["features"]
    (tmp_path / "summary.json").write_text(json.dumps(older))
    code, text = verify(tmp_path, capsys)
    assert code == 1 and "lists no features: written by an older image-tfrecords" in text
    (tmp_path / "summary.json").write_text(json.dumps({"splits": {}}))
    code, text = verify(tmp_path, capsys)
    assert code == 1 and "is not a summary.json image-tfrecords reads" in text
    assert "rows_read\n  Field required" in text


def fail_a_run(output, run_id, started_at, problem):
    """The files a run that failed its outcome check leaves in `output`: its FAILED.json
    (as the publish step writes it) and its staged report."""
    temp = temp_dir(str(output), run_id)
    os.makedirs(staged_dir(temp))
    summary = Summary(
        options=RunOptions(),
        rows_read=2,
        examples_written=1,
        rows_in_examples=1,
        rows_dead_lettered=1,
        accounted=True,
        error_fraction=0.5,
        splits={},
        vocabulary={"label": ["cat"]},
        started_at=started_at,
    )
    failure = Failure(
        problems=(problem,), dead_letters=(), record=failure_record(temp), summary=summary
    )
    with open(failure.record, "w") as out:
        out.write(failure.to_json())
    with open(staged_report(temp), "w") as out:
        out.write("<html>")
    return temp


@pytest.mark.parametrize("command", [verify_main, report_main])
def test_a_failed_runs_folder_says_the_run_failed_why_and_where_to_look(tmp_path, capsys, command):
    """No summary.json, but two failed runs' temp folders: the last one's reason and files
    are named, and it is no output (exit 1), named by its folder or its summary.json."""
    out = tmp_path / "out"
    fail_a_run(out, "0123456789ab", "2026-01-01T10:00:00+00:00", "no example was written")
    last = fail_a_run(
        out,
        "ba9876543210",
        "2026-01-02T10:00:00+00:00",
        "50.0% of rows were dead-lettered, more than --max_error_fraction 1.0%",
    )
    for given in (out, out / "summary.json"):
        code = command([str(given)])
        error = capsys.readouterr().err
        assert code == 1
        assert error == (
            f"error: {given}: no output: summary.json was not published, as the last run "
            "failed: 50.0% of rows were dead-lettered, more than --max_error_fraction 1.0%; "
            f"see {failure_record(last)}; its report: {staged_report(last)}\n"
        )


def test_an_output_with_a_later_failed_run_beside_it_is_verified_and_the_failure_said(
    tfrecord_output, tmp_path, capsys
):
    output = copy_output(tfrecord_output, tmp_path / "out")
    later = fail_a_run(
        output, "0123456789ab", "2026-01-01T10:00:00+00:00", "no example was written"
    )
    code, text = verify(output / "summary.json", capsys)
    assert code == 0 and text.startswith("ok: ")
    assert (
        f"warning: {output}/summary.json: this is the output an earlier run published; "
        "a later run failed and published nothing: no example was written; see "
        f"{failure_record(later)}; its report: {staged_report(later)}"
    ) in text


@pytest.mark.parametrize(
    "given, folder",
    [
        ("out/summary.json", "out"),
        ("out/", "out"),
        ("summary.json", "."),
        ("gs://bucket/out/summary.json", "gs://bucket/out"),
        ("s3://bucket/summary.json", "s3://bucket"),
        ("out/summary.json/", "out/summary.json"),
    ],
)  # a trailing / names a folder
def test_an_output_is_named_by_its_folder_or_its_summary_json(given, folder):
    assert output_folder(given) == folder
