"""Reuse by source identity (--reuse_from, core/records/example_index.py): a run over a changed
dataset copies each unchanged example from the previous output and gives the bytes a
full run gives; what changed is read again, and only that."""

import json
import os
import shutil
import tracemalloc
from urllib.parse import unquote

import pytest
from conftest import (
    SAMPLE_DATA,
    convert,
    encode,
    get,
    output_digests,
    photo_like,
    put,
    rewrite_records,
)

from image_tfrecords.core.records import example_index, naming

SPLITS = ("train", "train", "train", "validation", "test")
CHANGE_FIELDS = (
    "examples_added",
    "examples_removed",
    "relabelled",
    "images_changed",
    "splits_moved",
)


def _images(root):
    """The sample photos (cat, coffee, flower), copied: the tests change them."""
    found = []
    for label in ("cat", "coffee", "flower"):
        folder = root / label
        shutil.copytree(SAMPLE_DATA / "images" / label, folder)
        found += [(label, path) for path in sorted(folder.iterdir()) if path.stat().st_size > 200]
    return found


def _manifest_text(rows):
    return "split,image_uri,label\n" + "".join(f"{s},{uri},{label}\n" for s, uri, label in rows)


def _manifest(path, rows):
    path.write_text(_manifest_text(rows))
    return str(path)


@pytest.fixture(scope="module")
def day_one(tmp_path_factory):
    root = tmp_path_factory.mktemp("reuse")
    images = _images(root / "images")[:30]
    rows = [(SPLITS[i % len(SPLITS)], str(path), label) for i, (label, path) in enumerate(images)]
    manifest = _manifest(root / "day1.csv", rows)
    output = convert(root / "output1", "--manifest", manifest, "--num_shards", "2")
    return root, rows, output


def reusing(root, previous, output):
    """Day one's rows (their images as day one read them: a later test changes some)
    converted again into `output`, reusing `previous`."""
    return convert(
        output,
        "--manifest",
        str(root / "day1.csv"),
        "--num_shards",
        "2",
        "--reuse_from",
        str(previous),
    )


def _reads(monkeypatch):
    """The images the shard writer reads (worker processes off: it runs in this one)."""
    from image_tfrecords.core.worker import shard_writer

    read, reads = shard_writer.read_image_bytes, []

    def counted(uri, *args):
        reads.append(uri)
        return read(uri, *args)

    monkeypatch.setattr(shard_writer, "read_image_bytes", counted)
    return reads


def _summary(output):
    return json.loads((output / naming.SUMMARY_FILE).read_text())


def test_an_option_that_shapes_examples_reuses_none(day_one, tmp_path):
    root, rows, previous = day_one
    manifest = _manifest(tmp_path / "same.csv", rows)
    output = convert(
        tmp_path / "out",
        "--manifest",
        manifest,
        "--num_shards",
        "2",
        "--max_side",
        "32",
        "--reuse_from",
        str(previous),
    )
    assert _summary(output)["examples_reused"] == 0


def test_a_damaged_previous_shard_or_index_is_read_again_not_copied(day_one, tmp_path):
    """A flipped byte in a previous record fails its CRC; an index out of step with its
    shard names another image's record at a place (the record's SHA-256 says so): those
    shards' images are read, and the output is the previous one's bytes (the same
    inputs)."""
    root, rows, previous = day_one
    damaged = shutil.copytree(previous, tmp_path / "damaged")
    shard = sorted(damaged.glob("train-*.tfrecord"))[0]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    # The validation shard with the most examples: which shard an example goes to follows
    # its path, so a shard of one (nothing to swap) happens.
    index = max(
        (damaged / "sources").glob("validation-*.index.jsonl"),
        key=lambda path: len(path.read_text().splitlines()),
    )
    first, second, *rest = [json.loads(line) for line in index.read_text().splitlines()]
    first["sha256"], second["sha256"] = second["sha256"], first["sha256"]
    index.write_text("".join(json.dumps(entry) + "\n" for entry in [first, second, *rest]))
    output = reusing(root, damaged, tmp_path / "out")
    summary = _summary(output)
    validation_shard = len(rest) + 2  # read again whole, from its first example
    assert 0 < summary["examples_reused"] < summary["examples_written"] - validation_shard
    assert output_digests(output) == output_digests(previous)


def test_a_planted_image_or_label_in_a_reused_record_is_not_published(day_one, tmp_path):
    """A previous record whose image bytes were swapped (its stated SHA-256 and source id
    left as they were) and another whose class text and id were changed (issue 55): the
    first is read again from its image, the second gets this run's labels; the output is
    a full run's bytes."""
    root, _, previous = day_one
    planted = shutil.copytree(previous, tmp_path / "planted")
    shard = sorted(planted.glob("train-*.tfrecord"))[0]
    other = encode(photo_like(40, 30, 9), "JPEG")

    def plant(index, example):
        features = example.features.feature
        if index == 0:
            features["image/encoded"].bytes_list.value[0] = other
        elif index == 1:
            features["image/class/text"].bytes_list.value[0] = b"planted"
            features["image/class/label"].int64_list.value[0] = 0

    rewrite_records(shard, plant)
    output = reusing(root, planted, tmp_path / "out")
    summary = _summary(output)
    assert 0 < summary["examples_reused"] < summary["examples_written"]
    assert output_digests(output) == output_digests(previous)


def test_a_box_changed_in_a_reused_detection_record_is_not_published(tmp_path):
    """A previous detection record whose box was moved, everything else (its image, its
    index entry) left as it was: its features no longer digest to the entry's, so its
    shard's images are read again, with a warning, and the output is a full run's bytes."""
    flags = [
        "--manifest",
        str(SAMPLE_DATA / "detection.csv"),
        "--label_mode",
        "detection",
        "--max_error_fraction",
        "0.5",  # the sample's two bad boxes
    ]
    previous = convert(tmp_path / "day1", *flags, "--num_shards", "1")
    planted = shutil.copytree(previous, tmp_path / "planted")
    (shard,) = planted.glob("train-*.tfrecord")

    def plant(index, example):
        if index == 1:
            example.features.feature["image/object/bbox/xmin"].float_list.value[0] += 0.125

    rewrite_records(shard, plant)
    output = convert(tmp_path / "out", *flags, "--num_shards", "1", "--reuse_from", str(planted))
    assert _summary(output)["examples_reused"] < _summary(previous)["examples_written"]
    assert output_digests(output) == output_digests(previous)


def test_a_previous_shard_that_links_out_of_the_reused_folder_is_not_copied(day_one, tmp_path):
    """A shard of the reused output replaced by a link to a file elsewhere (here a copy of
    itself, so that nothing else would tell): confinement applies where links lead, so its
    examples are read again, not copied (issue 55)."""
    root, _, previous = day_one
    planted = shutil.copytree(previous, tmp_path / "planted")
    shard = sorted(planted.glob("train-*.tfrecord"))[0]
    elsewhere = shutil.copy(shard, tmp_path / "elsewhere.tfrecord")
    shard.unlink()
    shard.symlink_to(elsewhere)
    output = reusing(root, planted, tmp_path / "out")
    train = _summary(previous)["splits"]["train"]["shards"][0]["records"]
    assert _summary(output)["examples_reused"] == _summary(output)["examples_written"] - train
    assert output_digests(output) == output_digests(previous)


def test_a_fifo_or_a_device_in_place_of_a_previous_file_is_read_again_not_waited_on(
    day_one, tmp_path
):
    """A FIFO where a previous shard was and /dev/zero where another's thumbnails were
    (issue 55): neither is opened for a read that waits or never ends; their images are
    read again and the output is the previous one's bytes."""
    root, _, previous = day_one
    planted = shutil.copytree(previous, tmp_path / "planted")
    shard, other = sorted(planted.glob("train-*.tfrecord"))
    shard.unlink()
    os.mkfifo(shard)
    thumbnails = planted / "sources" / f"{other.name}.thumbnails"
    assert thumbnails.exists()
    thumbnails.unlink()
    thumbnails.symlink_to("/dev/zero")
    output = reusing(root, planted, tmp_path / "out")
    summary = _summary(output)
    assert 0 < summary["examples_reused"] < summary["examples_written"]
    assert output_digests(output) == output_digests(previous)


def test_a_changed_dataset_reuses_what_did_not_change_and_gives_a_full_runs_bytes(
    day_one, tmp_path, monkeypatch
):
    root, rows, previous = day_one
    rows = list(rows)
    # One thing at a time, each on its own image:
    changed_bytes = rows[0][1]  # other bytes of the same size, a later time
    size, stat = os.path.getsize(changed_bytes), os.stat(changed_bytes)
    with open(changed_bytes, "r+b") as file:
        file.seek(size // 2)
        byte = file.read(1)
        file.seek(size // 2)
        file.write(bytes([byte[0] ^ 0x01]))
    os.utime(changed_bytes, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    touched = rows[1][1]  # the same bytes, a later time: read again, the same example
    # Other bytes of the same size, its time set back (`exiftool -P`, `rsync --inplace
    # -t`): only the change time, which no user can set, tells (issue 55).
    restored = rows[6][1]
    stat = os.stat(restored)
    with open(restored, "r+b") as file:
        file.seek(os.path.getsize(restored) // 2)
        byte = file.read(1)
        file.seek(-1, os.SEEK_CUR)
        file.write(bytes([byte[0] ^ 0x01]))
    os.utime(restored, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (os.stat(restored).st_mtime_ns, os.stat(restored).st_ino) == (
        stat.st_mtime_ns,
        stat.st_ino,
    )
    os.utime(touched, ns=(os.stat(touched).st_atime_ns, os.stat(touched).st_mtime_ns + 1000))
    rows[2] = (rows[2][0], rows[2][1], "coffee" if rows[2][2] != "coffee" else "cat")  # relabelled
    removed = rows.pop(3)
    moved = rows[4] = ("test" if rows[4][0] != "test" else "train", *rows[4][1:])
    added = root / "images" / "added.png"
    added.write_bytes(encode(photo_like(64, 48, seed=46), "PNG"))
    # Of a new class, sorted first: every other label's id moves up by one.
    rows.append(("train", str(added), "armadillo"))
    manifest = _manifest(tmp_path / "day2.csv", rows)

    reads = _reads(monkeypatch)
    # Three shards a split where day one had two: rows move between shards.
    reused = convert(
        tmp_path / "reused",
        "--manifest",
        manifest,
        "--num_shards",
        "3",
        "--reuse_from",
        str(previous),
        "--worker_processes",
        "0",
    )
    read_again = sorted(reads)
    full = convert(tmp_path / "full", "--manifest", manifest, "--num_shards", "3")

    assert output_digests(reused) == output_digests(full)
    assert sorted(str(path) for path in (reused / "sources").iterdir()) != []
    # The moved one and the new one too; neither the relabelled one nor any whose label
    # id moved: their copies get the label fields their rows give now.
    expected_reads = sorted([changed_bytes, touched, restored, moved[1], str(added)])
    assert read_again == expected_reads
    summary = _summary(reused)
    assert summary["reused_from"] == str(previous)
    assert summary["examples_reused"] == summary["examples_written"] - len(expected_reads)
    assert removed[1] not in {entry.uri for entry in _entries(reused)}
    # What changed since, said (core/report/changes.py), in summary.json and report.html:
    changes = summary["changes"]
    assert {kind: changes[kind]["first"] for kind in CHANGE_FIELDS} == {
        "examples_added": [str(added)],
        "examples_removed": [removed[1]],
        "relabelled": [rows[2][1]],
        "images_changed": sorted([changed_bytes, restored]),  # not the touched one's
        "splits_moved": [moved[1]],
    }
    assert changes["unchanged"] == summary["examples_written"] - 5
    assert "What changed since" in (reused / "report.html").read_text()
    assert _summary(full)["examples_reused"] == 0


def test_an_array_record_output_is_copied_by_index_and_gives_its_bytes(tmp_path, monkeypatch):
    """ArrayRecord shards are copied from as TFRecord shards are: each wanted record read
    at its index (read_at), no image read again, the output the first run's."""
    images = _images(tmp_path / "images")[:12]
    rows = [(SPLITS[i % len(SPLITS)], str(path), label) for i, (label, path) in enumerate(images)]
    flags = ["--manifest", _manifest(tmp_path / "m.csv", rows), "--file_format", "array_record"]
    first = convert(tmp_path / "first", *flags, "--num_shards", "2")
    reads = _reads(monkeypatch)
    flags += ["--num_shards", "2", "--reuse_from", str(first), "--worker_processes", "0"]
    reused = convert(tmp_path / "reused", *flags)
    assert reads == []
    assert _summary(reused)["examples_reused"] == _summary(reused)["examples_written"] == 12
    assert output_digests(reused) == output_digests(first)


@pytest.mark.parametrize("bucket", ["gcs", "s3"])
def test_reuse_on_a_bucket_is_decided_from_object_metadata_alone(bucket, request):
    """The unchanged images are not downloaded (the proxy's log of the server's requests):
    their CRC32C (gs://) or ETag (s3://) says they are the bytes read before."""
    server = request.getfixturevalue(bucket)
    folder = f"{server.url}/reuse-{bucket}"
    names = [f"photo{i}.png" for i in range(6)]
    for i, name in enumerate(names):
        put(f"{folder}/img/{name}", encode(photo_like(20 + i, 16, seed=i), "PNG"))
    rows = [
        (SPLITS[i % len(SPLITS)], f"{folder}/img/{name}", "cat") for i, name in enumerate(names)
    ]
    put(f"{folder}/m.csv", _manifest_text(rows).encode())

    def run(output, *flags):
        flags = (*flags, *getattr(server, "flags", ()))
        return convert(output, "--manifest", f"{folder}/m.csv", "--num_shards", "1", *flags)

    run(f"{folder}/day1")
    put(f"{folder}/img/{names[0]}", encode(photo_like(20, 16, seed=99), "PNG"))
    server.proxy.reset()
    run(f"{folder}/day2", "--reuse_from", f"{folder}/day1")
    downloads = {
        unquote(path).split("?")[0]
        for method, path, _ in server.proxy.requests
        if method == "GET"
        and (bucket == "s3" or "alt=media" in path)
        and any(name in unquote(path) for name in names)
    }  # (a GCS read may take more than one request)
    assert [path.rsplit("/", 1)[-1] for path in downloads] == [names[0]]
    assert json.loads(get(f"{folder}/day2/{naming.SUMMARY_FILE}"))["examples_reused"] == 5


GOOD_ENTRY = example_index.IndexEntry(
    position=0,
    uri="/a.jpg",
    split="train",
    labels=("cat",),
    sha256="0" * 64,
    perceptual_hash=1,
    source_bytes=10,
    reencoded=None,
    longest_side=5,
    identity="local:1:2:3",
    key="k",
)


def test_an_index_line_that_is_not_an_entry_is_refused_by_line(tmp_path):
    good = GOOD_ENTRY
    path = tmp_path / "x.index.jsonl"
    path.write_text(good.model_dump_json() + "\n" + '{"position": 1, "uri": 5}\n')
    with pytest.raises(example_index.ExampleIndexError, match="line 2"):
        list(example_index.read_index(str(path)))
    path.write_text(good.model_copy(update={"position": 3}).model_dump_json() + "\n")
    with pytest.raises(example_index.ExampleIndexError, match="in order"):
        list(example_index.read_index(str(path)))


def test_an_index_line_too_long_to_be_an_entry_is_refused_unread(tmp_path):
    """A line of 64 MiB (an index in a folder others can write to) is refused by line
    without being held whole: memory follows the limit, not the line."""
    path = tmp_path / "x.index.jsonl"
    with path.open("wb") as file:
        file.write(GOOD_ENTRY.model_dump_json().encode() + b"\n")
        for _ in range(64):
            file.write(b"x" * (1 << 20))
    tracemalloc.start()
    try:
        with pytest.raises(example_index.ExampleIndexError, match="line 2 is over"):
            list(example_index.read_index(str(path)))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * example_index.MAX_LINE_BYTES < 64 << 20
    # A line of the limit itself, and its line end, is read and judged as an entry.
    path.write_bytes(b"x" * example_index.MAX_LINE_BYTES + b"\n")
    with pytest.raises(example_index.ExampleIndexError, match="line 1 is not an example"):
        list(example_index.read_index(str(path)))


def test_routing_a_crafted_index_holds_no_entry_s_labels(tmp_path):
    """An index whose lines are each at the limit with one-character labels (issue 55: a
    few 16 MiB lines once took 2 GB): the router parses one line at a time and keeps
    none of an entry's labels, so memory follows a line and the entries' URIs."""
    from image_tfrecords.core.storage.filesystem_options import FilesystemOptions
    from image_tfrecords.core.worker.shard_writer import SplitPlan
    from image_tfrecords.transforms.previous_examples import _Route

    path = tmp_path / "train-00000-of-00001.tfrecord.index.jsonl"
    labels = ("a",) * ((example_index.MAX_LINE_BYTES - 1000) // 4)
    with path.open("w") as file:
        for position in range(8):
            entry = GOOD_ENTRY.model_copy(
                update={"position": position, "uri": f"/{position}.jpg", "labels": labels}
            )
            line = entry.model_dump_json()
            assert len(line) <= example_index.MAX_LINE_BYTES
            file.write(line + "\n")
    files = example_index.PreviousShardFiles(str(path), "shard", "thumbnails")
    tracemalloc.start()
    try:
        routed = list(_Route(FilesystemOptions()).process(files, {"train": SplitPlan(2)}))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    kept = [entry for _, (_, previous) in routed for entry in previous.unpacked()]
    assert sorted(entry.uri for entry in kept) == [f"/{n}.jpg" for n in range(8)]
    assert all(entry.labels == () for entry in kept)
    assert peak < 40 * example_index.MAX_LINE_BYTES  # one line's labels parsed at a time


@pytest.mark.parametrize(
    "name", ["notes.index.jsonl", "train-00000-of-00001.tfrecord.idx", "train.index.jsonl"]
)
def test_only_a_published_shards_index_names_a_shard(name):
    assert naming.indexed_shard(f"/out/sources/{name}") is None
    assert naming.indexed_shard("/out/sources/train-00000-of-00001.tfrecord.index.jsonl") == (
        naming.PublishedShard("train", 0, 1, ".tfrecord")
    )


def test_an_entry_without_identity_is_never_reused():
    entry = example_index.IndexEntry(
        position=0,
        uri="http://host/a.jpg",
        split="train",
        labels=(),
        sha256="0" * 64,
        perceptual_hash=0,
        source_bytes=1,
        reencoded=None,
        longest_side=1,
        identity=None,
        key="k",
        features_digest="d",
    )
    assert not entry.reusable_for("k", None)
    assert entry.model_copy(update={"identity": "x"}).reusable_for("k", "x")
    # An index written before features were digested: its examples are read again.
    assert not entry.model_copy(update={"identity": "x", "features_digest": None}).reusable_for(
        "k", "x"
    )


def _entries(output):
    return [
        entry
        for path in sorted((output / "sources").glob("*.index.jsonl"))
        for entry in example_index.read_index(str(path))
    ]
