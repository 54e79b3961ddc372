"""Shard planning and the per-shard writer, on real image files."""

import concurrent.futures
import hashlib
import io
import json
import pickle
import threading
import time

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.internal import pickler
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from conftest import encode, feature, photo_like, read_examples
from PIL import Image

from image_tfrecords.core.file_formats import shard_format
from image_tfrecords.core.imaging.images import prepare_image
from image_tfrecords.core.inputs.boxes import turned_box
from image_tfrecords.core.inputs.rows import DEAD_LETTERS
from image_tfrecords.core.records.image_settings import ImageSettings
from image_tfrecords.core.records.records import Box, LabelledRow, ManifestRow
from image_tfrecords.core.records.run_settings import RunSettings
from image_tfrecords.core.records.workers import Workers
from image_tfrecords.core.storage import filesystem_options
from image_tfrecords.core.worker.row_tasks import pack, survey
from image_tfrecords.core.worker.shard_writer import ShardTask, _ordered_map, pack_rows, write_shard
from image_tfrecords.transforms import shards
from image_tfrecords.transforms.shards import (
    EXAMPLE_KEYS,
    SIZE_SAMPLE,
    PlanShards,
    SplitPlan,
    WriteShards,
    _WriteShardFile,
    part_of,
    shard_of,
    shards_for,
)


def tagged(outputs, tag):
    return [o.value for o in outputs if isinstance(o, beam.pvalue.TaggedOutput) and o.tag == tag]


def labelled(tmp_path, name, label_id=0, split="train", data=None):
    path = tmp_path / name
    if data is not None:
        path.write_bytes(data)
    return LabelledRow(
        ManifestRow(
            "m.csv", len(name), f"{split},{name},x", split, str(path), (f"label{label_id}",)
        ),
        (label_id,),
    )


def test_shard_count_from_size_never_exceeds_rows():
    assert shards_for(1000, 1_000_000, 128 << 20) == 8  # 1 GB at 128 MiB
    assert shards_for(3, 100 << 20, 1 << 20) == 3
    assert shards_for(10, 0.0, 1 << 20) == 1


def test_shard_of_is_stable_and_spreads_uris():
    assert shard_of("gs://b/a.jpg", 8) == shard_of("gs://b/a.jpg", 8)
    counts = [0] * 4
    for i in range(4000):
        counts[shard_of(f"img/{i}.jpg", 4)] += 1
    assert min(counts) > 900


def test_ordered_map_keeps_order_and_bounds_work_in_flight():
    in_flight, peak, lock = 0, 0, threading.Lock()

    def slow(item):
        nonlocal in_flight, peak
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
        time.sleep(0.002 * (item % 3))
        with lock:
            in_flight -= 1
        return item * 2

    def items():
        yield from range(50)

    with concurrent.futures.ThreadPoolExecutor(4) as executor:
        assert list(_ordered_map(executor, slow, items(), window=5)) == [i * 2 for i in range(50)]
    assert peak <= 5


def test_plan_from_sampled_file_sizes(tmp_path):
    rows = [labelled(tmp_path, f"{i}.bin", data=b"x" * 1000, split="train").row for i in range(40)]
    rows += [labelled(tmp_path, f"t{i}.bin", data=b"x" * 1000, split="test").row for i in range(2)]
    # Two chunks' surveys: the plan samples the split's files across them.
    surveys = [survey(rows[:25], SIZE_SAMPLE), survey(rows[25:], SIZE_SAMPLE)]
    with TestPipeline() as p:
        plan = (
            p
            | beam.Create(surveys)
            | PlanShards(
                None,
                target_shard_bytes=10_000,
                workers=Workers(1),
                filesystems=filesystem_options.FilesystemOptions(),
            )
        )
        assert_that(plan, equal_to([("train", SplitPlan(4, 1)), ("test", SplitPlan(1, 1))]))


def test_parts_keep_the_workers_busy_and_are_ranges_of_the_write_order(monkeypatch):
    monkeypatch.setattr(shards, "PART_ROWS", 10)
    # 2 shards for 8 workers: 8 parts each, were it not for PART_ROWS (48 rows a shard).
    assert shards.plan_split(rows=95, shards=2, workers=8) == SplitPlan(2, 5)
    assert shards.plan_split(rows=950, shards=2, workers=8) == SplitPlan(2, 8)
    assert shards.plan_split(rows=950, shards=4, workers=2) == SplitPlan(4, 1)  # shards enough
    assert shards.plan_split(rows=950, shards=1, workers=0) == SplitPlan(1, 1)  # in-process
    assert shards.plan_split(rows=3, shards=3, workers=8) == SplitPlan(3, 1)
    uris = sorted(
        (f"gs://b/{i}.jpg" for i in range(200)),
        key=lambda uri: hashlib.sha256(uri.encode()).digest(),
    )
    parts = [part_of(uri, 4) for uri in uris]
    assert parts == sorted(parts)  # in the write order, parts follow each other
    assert set(parts) == {0, 1, 2, 3} and max(map(parts.count, range(4))) < 80


def test_shards_are_the_same_however_rows_are_packed(tmp_path):
    rows = [
        labelled(
            tmp_path,
            f"{i}.png",
            i % 3,
            split=("train", "test")[i % 2],
            data=encode(photo_like(8, 8, i), "PNG"),
        )
        for i in range(24)
    ]

    planned = {"train": SplitPlan(3), "test": SplitPlan(2)}

    def write(rows_a_chunk, folder):
        """The rows packed as chunks of `rows_a_chunk` rows each pack them (row_tasks)."""
        packs = []
        for start in range(0, len(rows), rows_a_chunk):
            chunk = rows[start : start + rows_a_chunk]
            packs += pack(
                [item.row for item in chunk],
                planned,
                lambda row: next(item for item in chunk if item.row == row),
            ).packs
        with TestPipeline() as p:
            _ = (
                p
                | beam.Create(packs)
                | WriteShards(str(folder), RunSettings(workers=Workers(1, read_threads=2)))
            )
        # The shards and the thumbnails written beside them; of their receipts (which name
        # the files where they are) the digest of the rows each was written from.
        return {
            str(path.relative_to(folder)): (
                json.loads(path.read_bytes())["rows_digest"]
                if path.suffix == ".json"
                else path.read_bytes()
            )
            for path in folder.rglob("*")
            if path.is_file()
        }

    one_pack_per_shard = write(len(rows), tmp_path / "one")
    assert write(1, tmp_path / "per_row") == one_pack_per_shard  # a pack per row
    assert (
        sum(
            len(read_examples(str(tmp_path / "one" / name)))
            for name in one_pack_per_shard
            if name.endswith(".tfrecord")
        )
        == 24
    )
    # A thumbnails file beside each shard that got rows (where the rows' paths hash to:
    # now and then one of the 5 gets none).
    with_rows = {
        (item.row.split, shard_of(item.row.uri, planned[item.row.split].shards)) for item in rows
    }
    assert sum(name.startswith("thumbnails/") for name in one_pack_per_shard) == len(with_rows)
    assert sum(name.startswith("receipts/") for name in one_pack_per_shard) == len(with_rows)


def test_writer_orders_by_uri_hash_and_dead_letters_bad_images(tmp_path):
    good = [
        labelled(tmp_path, f"{i}.jpg", i % 2, data=encode(photo_like(16, 12, i), "JPEG"))
        for i in range(6)
    ]
    missing = labelled(tmp_path, "missing.jpg")
    writer = _WriteShardFile(
        str(tmp_path / "tmp"), RunSettings(workers=Workers(2, read_threads=3)), resuming=False
    )
    writer.setup()
    try:
        outputs = bundle(writer, (("train", 2), as_grouped([missing, *reversed(good)])))
        first_bytes = open(tmp_path / "tmp" / "train-00002.tfrecord", "rb").read()
        again = bundle(writer, (("train", 2), as_grouped([*good, missing])))  # a retry
    finally:
        writer.teardown()
    written = [o for o in outputs if not isinstance(o, beam.pvalue.TaggedOutput)]
    dead = tagged(outputs, DEAD_LETTERS)
    assert [d.reason for d in dead] == ["file_not_found"]
    (examples,) = tagged(outputs, EXAMPLE_KEYS)  # one element for the shard's examples
    keys = examples.keys
    (shard,) = written
    assert (examples.split, examples.shard) == ("train", 2)
    assert [ref.position for _, ref in keys] == list(range(6))
    assert [sha for sha, _ in keys] == [
        feature(e, "image/key/sha256").decode() for e in read_examples(shard.temp_path)
    ]
    assert shard.temp_path == str(tmp_path / "tmp" / "train-00002.tfrecord")
    assert (shard.examples, shard.labels) == (6, {"label0": 3, "label1": 3})
    examples = read_examples(shard.temp_path)
    uris = [feature(e, "image/source_id").decode() for e in examples]
    assert uris == sorted(
        (item.row.uri for item in good), key=lambda uri: hashlib.sha256(uri.encode()).digest()
    )
    assert [o for o in again if not isinstance(o, beam.pvalue.TaggedOutput)] == written
    assert open(shard.temp_path, "rb").read() == first_bytes


def test_detection_rows_of_one_image_make_one_example_and_fail_together(tmp_path):
    (tmp_path / "a.jpg").write_bytes(encode(photo_like(16, 12, 0), "JPEG"))

    def box(name, line, label_id, x):
        return LabelledRow(
            ManifestRow(
                "m.csv",
                line,
                "raw",
                "train",
                str(tmp_path / name),
                (f"label{label_id}",),
                (Box(x, 0.1, x + 0.1, 0.2),),
            ),
            (label_id,),
        )

    rows = [
        box("missing.jpg", 1, 0, 0.1),
        box("a.jpg", 5, 1, 0.5),
        box("missing.jpg", 2, 1, 0.2),
        box("a.jpg", 3, 0, 0.3),
    ]
    shard, dead = write_one_shard(tmp_path, rows, "detection")
    assert sorted((d.line, d.reason) for d in dead) == [
        (1, "file_not_found"),
        (2, "file_not_found"),
    ]
    assert (shard.examples, shard.rows, shard.labels) == (1, 2, {"label0": 1, "label1": 1})
    (example,) = read_examples(shard.temp_path)
    assert feature(example, "image/object/class/label") == [1, 2]  # rows 3 then 5
    assert [round(x, 6) for x in feature(example, "image/object/bbox/xmin")] == [0.3, 0.5]


def bundle(writer, *elements):
    """What the writer gives for a bundle of these elements: the pool's outcomes come at
    its end, as windowed values."""
    writer.start_bundle()
    outputs = [output for element in elements for output in writer.process(element)]
    for output in writer.finish_bundle():
        if isinstance(output, beam.pvalue.TaggedOutput):
            outputs.append(beam.pvalue.TaggedOutput(output.tag, output.value.value))
        else:
            outputs.append(output.value)
    return outputs


def as_grouped(rows, parts=1):
    """LabelledRows as WriteShards' GroupByKey hands them to the writer: in packs, each
    with the part of the shard its rows are in (part_of)."""
    by_part = {}
    for row in rows:
        by_part.setdefault(part_of(row.row.uri, parts), []).append(row)
    return [
        (part, pack_rows(row.to_json() for row in chunk))
        for part, rows in by_part.items()
        for chunk in (rows[:2], rows[2:])
        if chunk
    ]


def write_one_shard(tmp_path, rows, label_mode, image=ImageSettings()):
    packs = tuple(pack for _, pack in as_grouped(rows))
    outcome = write_shard(
        ShardTask("train", 0, packs, str(tmp_path / "tmp")),
        RunSettings(label_mode=label_mode, image=image, workers=Workers(0, read_threads=2)),
    )
    return outcome.written, list(outcome.dead_letters)


def test_rows_repeating_an_image_single_label_first_row_wins_multi_label_merges(tmp_path):
    (tmp_path / "a.jpg").write_bytes(encode(photo_like(16, 12, 0), "JPEG"))

    def row(line, labels, ids):
        return LabelledRow(
            ManifestRow(
                "m.csv",
                line,
                f"train,a.jpg,{labels}",
                "train",
                str(tmp_path / "a.jpg"),
                tuple(labels.split("|")),
            ),
            ids,
        )

    rows = [row(7, "dog", (1,)), row(2, "cat", (0,)), row(4, "cat", (0,))]
    shard, dead = write_one_shard(tmp_path, rows, "single")
    assert (shard.examples, shard.rows, shard.labels) == (1, 1, {"cat": 1})
    assert sorted((d.line, d.reason) for d in dead) == [(4, "duplicate_row"), (7, "duplicate_row")]
    assert "m.csv line 2, with label 'cat' there" in [d for d in dead if d.line == 7][0].message

    rows = [row(7, "dog", (1,)), row(2, "cat|fish", (0, 2)), row(4, "cat", (0,))]
    shard, dead = write_one_shard(tmp_path, rows, "multi")
    assert (shard.examples, shard.rows, shard.labels, dead) == (
        1,
        3,
        {"cat": 1, "fish": 1, "dog": 1},
        [],
    )
    (example,) = read_examples(shard.temp_path)
    assert feature(example, "image/class/label") == [0, 2, 1]  # rows 2, 4, 7; cat once


def test_boxes_are_turned_upright_with_their_image_unless_drawn_upright(tmp_path):
    """a.jpg is stored 40x20 with EXIF orientation 6: written upright (a quarter turn
    clockwise), 20x40 before --max_side. A box drawn on the stored pixels (declared
    40x20, or no size and not drawn_upright) turns with the image; one drawn on the image
    upright (declared 20x40, or drawn_upright) stays. Sizes are the source's, before the
    resize; a size that is neither is size_mismatch."""
    image = photo_like(40, 20, 0)
    exif = image.getexif()
    exif[0x0112] = 6  # stored sideways; the example is turned upright
    (tmp_path / "a.jpg").write_bytes(encode(image, "JPEG", exif=exif.tobytes()))
    (tmp_path / "b.jpg").write_bytes(encode(photo_like(30, 30, 1), "JPEG"))

    def box(name, line, declared, upright=False):
        return LabelledRow(
            ManifestRow(
                "m.csv",
                line,
                "raw",
                "train",
                str(tmp_path / name),
                ("cat",),
                (Box(0.1, 0.2, 0.5, 0.4),),
                image_size=declared,
                drawn_upright=upright,
            ),
            (0,),
        )

    rows = [
        box("a.jpg", 1, (40, 20)),
        box("a.jpg", 2, (20, 40)),
        box("a.jpg", 3, None),
        box("a.jpg", 5, None, upright=True),
        box("a.jpg", 6, (40, 20), upright=True),
        box("a.jpg", 7, (30, 30)),
        box("b.jpg", 4, (60, 60)),
    ]
    shard, dead = write_one_shard(tmp_path, rows, "detection", ImageSettings(max_side=10))
    assert sorted((d.line, d.reason) for d in dead) == [(4, "size_mismatch"), (7, "size_mismatch")]
    assert "declares a 60x60 image but the image is 30x30 pixels" in min(dead).message
    assert (shard.examples, shard.rows) == (1, 5)  # a.jpg from rows 1, 2, 3, 5, 6
    (example,) = read_examples(shard.temp_path)
    assert (feature(example, "image/width"), feature(example, "image/height")) == (5, 10)
    turned, kept = (0.6, 0.1, 0.8, 0.5), (0.1, 0.2, 0.5, 0.4)  # (1 - y, x) for orientation 6
    np.testing.assert_allclose(
        np.transpose(
            [
                feature(example, f"image/object/bbox/{side}")
                for side in ("xmin", "ymin", "xmax", "ymax")
            ]
        ),
        [turned, kept, turned, kept, turned],
        rtol=1e-6,
    )


@pytest.mark.parametrize("orientation", range(2, 9))
def test_a_turned_box_covers_what_pillows_exif_turn_moved_its_pixels_to(orientation):
    """A white patch at a box of a black 60x40 PNG stored with an EXIF orientation: once
    prepare_image turns it upright, the patch lies exactly at turned_box of the box."""
    source = Image.new("L", (60, 40), 0)
    source.paste(255, (12, 8, 30, 36))  # x 12..30, y 8..36: Box(0.2, 0.2, 0.5, 0.9)
    exif = source.getexif()
    exif[0x0112] = orientation
    prepared = prepare_image(encode(source, "PNG", exif=exif.tobytes()), ImageSettings())
    assert prepared.turned == orientation
    upright = np.asarray(Image.open(io.BytesIO(prepared.encoded)))
    rows, columns = np.nonzero(upright)
    height, width = upright.shape
    found = (
        columns.min() / width,
        rows.min() / height,
        (columns.max() + 1) / width,
        (rows.max() + 1) / height,
    )
    np.testing.assert_allclose(turned_box(Box(0.2, 0.2, 0.5, 0.9), orientation)[:4], found)
    assert prepared.upright_source_size == (width, height)


def test_the_worker_processes_get_the_options_beams_filesystems_were_given():
    """What filesystem_options reads is Beam's own (no public getter): a Beam that keeps
    them elsewhere fails here, not in a run that cannot reach its bucket."""
    before = FileSystems._pipeline_options
    try:
        FileSystems.set_options(PipelineOptions(["--s3_endpoint_url", "http://127.0.0.1:1"]))
        assert filesystem_options.current_options()["s3_endpoint_url"] == "http://127.0.0.1:1"
    finally:
        FileSystems._pipeline_options = before


def test_no_credential_is_carried_in_the_pipeline_graph(tmp_path):
    """The shard writer is pickled into the job's graph; the S3 keys must not be."""
    with beam.Pipeline(options=PipelineOptions(["--s3_secret_access_key", "SECRET-KEY-123"])) as p:
        _ = p | beam.Create([]) | WriteShards(str(tmp_path), RunSettings(workers=Workers(0)))
        graph = p.to_runner_api()
    # Beam compresses what it pickles: each DoFn's payload is unpickled and searched.
    payloads = [
        pickler.loads(
            beam_runner_api_pb2.ParDoPayload.FromString(transform.spec.payload).do_fn.payload
        )
        for transform in graph.components.transforms.values()
        if transform.spec.urn == common_urns.primitives.PAR_DO.urn
    ]
    (writer,) = [fn for fn, *_ in payloads if isinstance(fn, _WriteShardFile)]
    assert b"SECRET-KEY-123" not in pickle.dumps(writer)


@pytest.mark.parametrize(
    "file_format, compression, processes",
    [("tfrecord", "none", 2), ("tfrecord", "gzip", 0), ("array_record", "none", 0)],
)
def test_a_shard_written_in_parts_is_the_shard_written_whole(
    tmp_path, file_format, compression, processes
):
    # At least 14 images, and as many as it takes for each of 4 parts to get one: a part
    # is a range of the hash of the URI, which holds tmp_path.
    good = []
    while len(good) < 14 or len({part_of(item.row.uri, 4) for item in good}) < 4:
        i = len(good)
        good.append(
            labelled(tmp_path, f"{i}.jpg", i % 3, data=encode(photo_like(16, 12, i), "JPEG"))
        )
    rows = [
        *good,
        labelled(tmp_path, "missing.jpg"),
        good[3]._replace(row=good[3].row._replace(line=99)),
    ]  # a dead letter, and a duplicate_row
    settings = RunSettings(
        shard_format=shard_format(file_format, compression),
        workers=Workers(processes, read_threads=2),
    )

    def write(folder, parts, resuming=False):
        writer = _WriteShardFile(str(folder), settings, resuming)
        writer.setup()
        try:
            outputs = bundle(writer, (("train", 0), as_grouped(rows, parts)))
        finally:
            writer.teardown()
        (written,) = [o for o in outputs if not isinstance(o, beam.pvalue.TaggedOutput)]
        files = {
            str(path.relative_to(folder)): path.read_bytes()
            for path in sorted(folder.rglob("*"))
            if path.is_file()
        }
        return (
            written._replace(temp_path=written.temp_path.replace(str(folder), "")),
            sorted(tagged(outputs, DEAD_LETTERS)),
            tagged(outputs, EXAMPLE_KEYS),
            files,
        )

    whole, whole_dead, whole_keys, whole_files = write(tmp_path / "whole", parts=1)
    joined, joined_dead, joined_keys, joined_files = write(tmp_path / "parts", parts=4)
    assert joined == whole and joined_dead == whole_dead and joined_keys == whole_keys
    assert sorted(d.reason for d in whole_dead) == ["duplicate_row", "file_not_found"]
    assert [ref.position for _, ref in joined_keys[0].keys] == list(range(len(good)))
    published = {
        name: data for name, data in whole_files.items() if not name.startswith("receipts/")
    }
    assert {name: joined_files[name] for name in published} == published
    # The parts' files are gone once joined; their receipts stay, for --resume.
    assert sorted(name for name in joined_files if name not in published) == [
        "receipts/train-00000-0000.receipt.json",
        "receipts/train-00000-0001.receipt.json",
        "receipts/train-00000-0002.receipt.json",
        "receipts/train-00000-0003.receipt.json",
        "receipts/train-00000.receipt.json",
    ]

    shard_file = tmp_path / "parts" / next(name for name in published if name.startswith("train"))
    before = shard_file.stat().st_mtime_ns
    again, again_dead, again_keys, _ = write(tmp_path / "parts", parts=4, resuming=True)
    assert again == whole._replace(resumed=True) and again_keys == whole_keys
    assert again_dead == whole_dead
    assert shard_file.stat().st_mtime_ns == before  # reused, not written again
