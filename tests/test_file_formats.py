"""The shard file-format interface: its registry, and each format written and read back
through both filesystems (Beam's, as the pipeline writes, and TensorFlow's gfile, as
readers read), checked against tf.data and the format's own library."""

import fnmatch

import pytest
import tensorflow as tf
from conftest import shard_records

from image_tfrecords.core import file_formats
from image_tfrecords.core.file_formats import (
    GFiles,
    PipelineFiles,
    RecordError,
    ShardFormat,
    compression_names,
    format_names,
    shard_format,
)
from image_tfrecords.core.file_formats.tfrecord import TFRecordFormat
from image_tfrecords.core.records import naming

RECORDS = [b"", b"one", bytes(range(256)) * 40, "ünïcode".encode()]


def test_formats_are_looked_up_by_name_and_refuse_what_they_cannot_do():
    assert format_names() == ("tfrecord", "array_record")
    assert isinstance(shard_format("tfrecord", "gzip"), TFRecordFormat)
    assert compression_names() == ("none", "gzip", "zstd")
    with pytest.raises(ValueError, match=r"unknown file format 'parquet': give one of .*tfrecord"):
        shard_format("parquet")
    with pytest.raises(
        ValueError, match="--compression zstd is not available with --file_format tfrecord"
    ):
        shard_format("tfrecord", "zstd")
    with pytest.raises(
        ValueError,
        match=r"--compression gzip is not available with "
        r"--file_format array_record \(only none, zstd\)",
    ):
        shard_format("array_record", "gzip")


FORMATS = [
    ("tfrecord", "none", ".tfrecord"),
    ("tfrecord", "gzip", ".tfrecord.gz"),
    ("array_record", "none", ".array_record"),
    ("array_record", "zstd", ".array_record"),
]


def write(fmt, path, files, records=RECORDS):
    with fmt.create(path, files) as writer:
        for record in records:
            writer.write(record)


@pytest.mark.parametrize("name, compression, suffix", FORMATS)
@pytest.mark.parametrize(
    "write_files, read_files", [(PipelineFiles, GFiles), (GFiles, PipelineFiles)]
)
def test_shards_read_back_as_written_and_as_tf_data_and_their_library_read_them(
    tmp_path, name, compression, suffix, write_files, read_files
):
    fmt = shard_format(name, compression)
    assert fmt.suffix == suffix
    shard = tmp_path / f"train-00000-of-00001{suffix}"
    path = str(shard)
    write(fmt, path, write_files())
    assert fnmatch.fnmatch(shard.name, naming.PublishedShard.glob("train", fmt.stem))
    assert list(fmt.read(path, read_files())) == RECORDS
    assert shard_records(shard) == RECORDS  # tf.data's or array_record's own reader
    assert [r.numpy() for r in fmt.dataset(tf.constant(path))] == RECORDS
    # The same records give the same bytes (no time or name in a gzip header).
    again = tmp_path / f"again{suffix}"
    write(fmt, str(again), write_files())
    assert again.read_bytes() == shard.read_bytes()


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_a_tfrecord_shard_has_an_index_of_where_each_record_starts(tmp_path, compression):
    fmt = shard_format("tfrecord", compression)
    shard = tmp_path / f"s{fmt.suffix}"
    write(fmt, str(shard), PipelineFiles())
    # A line per record, offsets in the uncompressed stream.
    assert fmt.companions == (".idx",)
    index = tmp_path / f"{shard.name}.idx"
    spans = [line.split() for line in index.read_text().splitlines()]
    sizes = [16 + len(record) for record in RECORDS]
    assert spans == [[str(sum(sizes[:i])), str(size)] for i, size in enumerate(sizes)]
    fmt.check_companions(str(shard), GFiles(), [len(record) for record in RECORDS])
    with pytest.raises(ValueError, match="4 lines for 3 records"):
        fmt.check_companions(str(shard), GFiles(), [len(record) for record in RECORDS[:3]])


def test_array_record_shards_elsewhere_than_on_disk_go_through_the_files_given(tmp_path):
    """The array_record library opens local paths only: a shard for another filesystem
    (ram:// here, gs:// or s3:// in a run) is written locally, then copied there."""
    fmt = shard_format("array_record")
    path = f"ram://{tmp_path.name}/train-00000-of-00001.array_record"
    write(fmt, path, GFiles())
    assert tf.io.gfile.exists(path) and not list(tmp_path.iterdir())
    assert list(fmt.read(path, GFiles())) == RECORDS
    assert [r.numpy() for r in fmt.dataset(tf.constant(path))] == RECORDS


@pytest.mark.parametrize("name, compression, suffix", FORMATS)
@pytest.mark.parametrize("files", [PipelineFiles, GFiles])
def test_a_shard_joined_from_parts_is_the_shard_written_whole(
    tmp_path, name, compression, suffix, files
):
    """Parts are TFRecord-framed files (core/worker/shard_parts.py). Joined, through local files
    (TFRecord's: copied by the kernel) or TensorFlow's streams (copied by Python), they
    give the whole shard's bytes and companions."""
    fmt = shard_format(name, compression)
    whole = tmp_path / f"whole{suffix}"
    write(fmt, str(whole), PipelineFiles(), RECORDS * 3)
    framing = shard_format("tfrecord")
    parts = []
    for place, records in enumerate([RECORDS, RECORDS[:1], RECORDS[1:] + RECORDS]):
        parts.append(str(tmp_path / f"part-{place}"))
        write(framing, parts[-1], PipelineFiles(), records)
    joined = tmp_path / f"joined{suffix}"
    fmt.join(str(joined), parts, files())
    assert joined.read_bytes() == whole.read_bytes()
    for companion in fmt.companions:
        assert (tmp_path / f"joined{suffix}{companion}").read_bytes() == (
            tmp_path / f"whole{suffix}{companion}"
        ).read_bytes()
    assert list(fmt.read(str(joined), GFiles())) == RECORDS * 3


def test_a_copy_the_kernel_refuses_is_made_by_python(tmp_path, monkeypatch):
    """copy_file_range fails across filesystems (EXDEV) and on some (EINVAL): the
    parts are then copied through Python, to the same bytes."""
    import errno
    import os

    from image_tfrecords.core.storage import storage

    source, target = tmp_path / "source", tmp_path / "target"
    source.write_bytes(b"framed records " * 1000)

    def refused(*arguments):
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))

    monkeypatch.setattr(os, "copy_file_range", refused)
    with storage.open_local(str(source)) as part, storage.create(str(target)) as shard:
        shard.write(b"head")
        storage.append(part, shard)
        shard.write(b"tail")
    assert target.read_bytes() == b"head" + source.read_bytes() + b"tail"


def test_a_part_whose_framing_breaks_is_not_joined_into_a_shard(tmp_path):
    """TFRecord's join reads only the records' headers: a length whose CRC fails, or a
    file that ends inside a record, is named as reading it would name it."""
    fmt = shard_format("tfrecord")
    part = tmp_path / "part"
    write(fmt, str(part), PipelineFiles())
    data = part.read_bytes()
    sizes = [16 + len(record) for record in RECORDS]
    part.write_bytes(data[: sum(sizes[:3]) + 20])
    with pytest.raises(RecordError, match=r"record 3 \(byte 10291\): truncated"):
        fmt.join(str(tmp_path / "s.tfrecord"), [str(part)], PipelineFiles())
    damaged = bytearray(data)
    damaged[sizes[0] + 2] ^= 0xFF  # record 1's length
    part.write_bytes(bytes(damaged))
    with pytest.raises(RecordError, match=r"record 1 \(byte 16\): length CRC mismatch"):
        fmt.join(str(tmp_path / "s.tfrecord"), [str(part)], PipelineFiles())
    part.write_bytes(data + data[:5])
    with pytest.raises(RecordError, match=r"record 4 .*5 bytes into the record's header"):
        fmt.join(str(tmp_path / "s.tfrecord"), [str(part)], PipelineFiles())


def test_a_damaged_array_record_is_named_by_its_index(tmp_path):
    fmt = shard_format("array_record")
    path = tmp_path / "s.array_record"
    records = [bytes([index]) * 5000 for index in range(8)]
    write(fmt, str(path), PipelineFiles(), records)
    data = bytearray(path.read_bytes())
    data[data.index(records[5]) + 100] ^= 0xFF
    path.write_bytes(bytes(data))
    reading = fmt.read(str(path), GFiles())
    with pytest.raises(RecordError, match=r"record 5: .*hash mismatch"):
        list(reading)
    # By index, the damaged record's chunk is read only when it is asked for.
    assert list(fmt.read_at(str(path), [4, 6], GFiles())) == [(4, records[4]), (6, records[6])]
    with pytest.raises(RecordError, match=r"record 5: .*hash mismatch"):
        list(fmt.read_at(str(path), [3, 5, 7], GFiles()))
    path.write_bytes(b"not an ArrayRecord file")
    with pytest.raises(RecordError, match="record 0: not a readable ArrayRecord file"):
        list(fmt.read(str(path), GFiles()))


def test_a_damaged_record_is_named_by_index_and_offset(tmp_path):
    fmt = shard_format("tfrecord")
    path = tmp_path / "s.tfrecord"
    with fmt.create(str(path), PipelineFiles()) as writer:
        for record in RECORDS:
            writer.write(record)
    data = bytearray(path.read_bytes())
    data[16 + 12] ^= 0xFF  # record 1's first byte: record 0 is 16 bytes, a header 12
    path.write_bytes(bytes(data))
    reading = fmt.read(str(path), GFiles())
    assert next(reading) == b""
    with pytest.raises(RecordError, match=r"record 1 \(byte 16\): data CRC mismatch"):
        next(reading)


@pytest.mark.parametrize("name, compression, suffix", FORMATS)
def test_records_at_positions_are_the_records_read_through(tmp_path, name, compression, suffix):
    """read_at gives the wanted records, each as `read` gives it, whatever the format
    skips; the TFRecord format skips a damaged record it is not asked for (its data is
    not read) and names one it is asked for."""
    fmt = shard_format(name, compression)
    path = str(tmp_path / f"s{suffix}")
    write(fmt, path, PipelineFiles())
    for positions in ([], [0], [1, 3], [0, 1, 2, 3], [3]):
        wanted = [(position, RECORDS[position]) for position in positions]
        assert list(fmt.read_at(path, positions, GFiles())) == wanted
    with pytest.raises(RecordError):
        list(fmt.read_at(path, [len(RECORDS)], GFiles()))  # past the last


def test_a_damaged_record_is_skipped_by_its_header_unless_asked_for(tmp_path):
    fmt = shard_format("tfrecord")
    path = tmp_path / "s.tfrecord"
    write(fmt, str(path), PipelineFiles())
    data = bytearray(path.read_bytes())
    data[16 + 12] ^= 0xFF  # record 1's first byte: record 0 is 16 bytes, a header 12
    path.write_bytes(bytes(data))
    assert list(fmt.read_at(str(path), [0, 2, 3], GFiles())) == [
        (0, RECORDS[0]),
        (2, RECORDS[2]),
        (3, RECORDS[3]),
    ]
    with pytest.raises(RecordError, match=r"record 1 \(byte 16\): data CRC mismatch"):
        list(fmt.read_at(str(path), [1], GFiles()))
    data[16 + 3] ^= 0xFF  # record 1's length: its header's CRC no longer matches
    path.write_bytes(bytes(data))
    # Record 2 is sought at the offset the .idx lists; without the index, the skip over
    # record 1 reads its header, and names it.
    assert list(fmt.read_at(str(path), [2], GFiles())) == [(2, RECORDS[2])]
    (tmp_path / "s.tfrecord.idx").unlink()
    with pytest.raises(RecordError, match=r"record 1 \(byte 16\): length CRC mismatch"):
        list(fmt.read_at(str(path), [2], GFiles()))


def test_an_index_that_lies_gives_no_other_record_unchecked(tmp_path):
    """A .idx is not trusted: an offset into the middle of a record fails its checks."""
    fmt = shard_format("tfrecord")
    path = tmp_path / "s.tfrecord"
    write(fmt, str(path), PipelineFiles())
    (tmp_path / "s.tfrecord.idx").write_text("0 16\n5 15\n")
    with pytest.raises(RecordError, match=r"record 1 \(byte 5\): length CRC mismatch"):
        list(fmt.read_at(str(path), [1], GFiles()))


def test_a_registered_format_is_offered_everywhere_formats_are_listed(monkeypatch):
    """What adding a format takes: its class, listed in the registry under its name."""

    class Plain(ShardFormat):
        name, tfds_name, stem = "plain", "plain", ".plain"

        def create(self, path, files):
            raise NotImplementedError

        def read(self, path, files):
            raise NotImplementedError

        def dataset(self, path):
            raise NotImplementedError

    monkeypatch.setitem(file_formats.FORMATS, Plain.name, Plain)
    assert "plain" in format_names()
    assert shard_format("plain").suffix == ".plain"
    assert naming.shard_globs("test") == (
        "test-*-of-*.tfrecord*",
        "test-*-of-*.array_record*",
        "test-*-of-*.plain*",
    )


def test_an_index_too_long_to_be_one_is_not_read(tmp_path, monkeypatch):
    """An earlier output's .idx longer than any index could be is left unread (memory
    follows the records copied): the records are reached by their headers instead."""
    from image_tfrecords.core.file_formats import tfrecord

    fmt = shard_format("tfrecord")
    path = tmp_path / "s.tfrecord"
    write(fmt, str(path), PipelineFiles())
    assert tfrecord._listed_starts(str(path), GFiles()) is not None
    monkeypatch.setattr(tfrecord, "_MAX_LISTED", 2)  # of 4 records: 2 lines of 8 bytes
    monkeypatch.setattr(tfrecord, "_INDEX_LINE_BYTES", 8)
    assert tfrecord._listed_starts(str(path), GFiles()) is None
    assert list(fmt.read_at(str(path), [3], GFiles())) == [(3, RECORDS[3])]
