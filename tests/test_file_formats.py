"""The shard file-format interface: its registry, and TFRecord written and read back
through both filesystems (Beam's, as the pipeline writes, and TensorFlow's gfile, as
readers read), checked against tf.data."""

import pytest
import tensorflow as tf

from transforms import file_formats
from transforms.file_formats import (BeamFiles, GFiles, RecordError, ShardFormat,
                                     format_names, shard_format, shard_globs)
from transforms.tfrecord_format import TFRecordFormat

RECORDS = [b"", b"one", bytes(range(256)) * 40, "ünïcode".encode()]


def test_formats_are_looked_up_by_name_and_refuse_what_they_cannot_do():
    assert "tfrecord" in format_names()
    assert isinstance(shard_format("tfrecord", "gzip"), TFRecordFormat)
    with pytest.raises(ValueError, match=r"unknown file format 'parquet': give one of .*tfrecord"):
        shard_format("parquet")
    with pytest.raises(ValueError, match="--compression zstd is not available with "
                                         "--file_format tfrecord"):
        shard_format("tfrecord", "zstd")


@pytest.mark.parametrize("compression, suffix", [("none", ".tfrecord"), ("gzip", ".tfrecord.gz")])
@pytest.mark.parametrize("write_files, read_files", [(BeamFiles, GFiles), (GFiles, BeamFiles)])
def test_tfrecord_shards_read_back_as_written_and_as_tf_data_reads_them(
        tmp_path, compression, suffix, write_files, read_files):
    fmt = shard_format("tfrecord", compression)
    assert fmt.suffix == suffix
    shard = tmp_path / f"train-00000-of-00001{suffix}"
    path = str(shard)
    with fmt.create(path, write_files()) as writer:
        for record in RECORDS:
            writer.write(record)
    assert list(fmt.read(path, read_files())) == RECORDS
    # Its index, written beside it: a line per record, offsets in the uncompressed stream.
    assert fmt.companions == (".idx",)
    index = tmp_path / f"{shard.name}.idx"
    spans = [line.split() for line in index.read_text().splitlines()]
    sizes = [16 + len(record) for record in RECORDS]
    assert spans == [[str(sum(sizes[:i])), str(size)] for i, size in enumerate(sizes)]
    fmt.check_companions(path, read_files(), [len(record) for record in RECORDS])
    with pytest.raises(ValueError, match="4 lines for 3 records"):
        fmt.check_companions(path, read_files(), [len(record) for record in RECORDS[:3]])
    assert [r.numpy() for r in fmt.dataset(tf.constant(path))] == RECORDS
    # The same records give the same bytes (no time or name in a gzip header).
    again = str(tmp_path / f"again{suffix}")
    with fmt.create(again, write_files()) as writer:
        for record in RECORDS:
            writer.write(record)
    assert (tmp_path / f"again{suffix}").read_bytes() == shard.read_bytes()


def test_a_damaged_record_is_named_by_index_and_offset(tmp_path):
    fmt = shard_format("tfrecord")
    path = tmp_path / "s.tfrecord"
    with fmt.create(str(path), BeamFiles()) as writer:
        for record in RECORDS:
            writer.write(record)
    data = bytearray(path.read_bytes())
    data[16 + 12] ^= 0xFF  # record 1's first byte: record 0 is 16 bytes, a header 12
    path.write_bytes(bytes(data))
    reading = fmt.read(str(path), GFiles())
    assert next(reading) == b""
    with pytest.raises(RecordError, match=r"record 1 \(byte 16\): data CRC mismatch"):
        next(reading)


def test_a_registered_format_is_offered_everywhere_formats_are_listed(monkeypatch):
    """What adding a format takes: its class, registered under its name."""
    monkeypatch.setattr(file_formats, "_FORMATS", dict(file_formats._FORMATS))

    @file_formats.register
    class Plain(ShardFormat):
        name, tfds_name, stem = "plain", "plain", ".plain"

        def create(self, path, files):
            raise NotImplementedError

        def read(self, path, files):
            raise NotImplementedError

        def dataset(self, path):
            raise NotImplementedError

    assert "plain" in format_names()
    assert shard_format("plain").suffix == ".plain"
    assert shard_globs("test") == ("test-*-of-*.tfrecord*", "test-*-of-*.plain*")
