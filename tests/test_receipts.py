"""Shard receipts are JSON data: written whole, read back as the same records, and one that
is there but is not a receipt (a pickle, say, which would run code when loaded) is
refused by name instead of being loaded."""

import pickle

import pytest

from worker.dead_letters import DeadLetter
from worker.naming import receipt_path
from worker.receipts import ReceiptError, ShardReceipt, read_receipt, write_receipt
from worker.records import (Box, ExampleContent, ExampleRef, Keypoints, ManifestRow, Mask, ShardOutcome,
                            ShardWritten)


def receipt(tmp_path):
    shard = tmp_path / "train-00000.tfrecord"
    shard.write_bytes(b"records")
    row = ManifestRow("m.csv", 3, "raw", "train", "gs://b/\udcffé.jpg", ("cat",),
                      (Box(0.1, 0.2, 0.3, 0.4, difficult=1),
                       Box(0.1, 0.2, 0.3, 0.4, mask=Mask(40, 30, ((1.5, 2, 9, 2, 9, 7.25),))),
                       Box(0.1, 0.2, 0.3, 0.4, mask=Mask(40, 30, counts="PX05"),
                           keypoints=Keypoints((0.2, 0.0), (0.3, 0.0), (2, 0), ("a", "b")))),
                      (7, 0.5, "x"), (40, 30))
    ref = ExampleRef("train", 0, 0, "m.csv", 3, row.uri, ("cat",), (1 << 64) - 1,
                     ExampleContent((row,), 123, "cmyk", 40))
    written = ShardWritten("train", 0, str(shard), 1, 1, 7, 123, {"cat": 1}, {"cmyk": 1},
                           {"<=64": 1}, {"<=1k": 1}, {"masks": 1})
    dead = DeadLetter("m.csv", 4, "raw", "gs://b/x.jpg", "train", "not_an_image", "no")
    return ShardReceipt("digest", ShardOutcome(written, (dead,), (("ab" * 32, ref),)),
                        ((str(shard), 7),))


def test_a_receipt_reads_back_as_the_records_written(tmp_path):
    written = receipt(tmp_path)
    path = receipt_path(str(tmp_path), "train", 0)
    write_receipt(path, written)
    assert read_receipt(path, "digest") == written
    assert read_receipt(path, "other rows") is None  # made from other rows: written again
    (tmp_path / "train-00000.tfrecord").write_bytes(b"cut")
    assert read_receipt(path, "digest") is None  # its shard is not the size it says


@pytest.mark.parametrize("content", [b"{not json", pickle.dumps({"rows_digest": "digest"}),
                                     b'{"version": 1, "rows_digest": "digest"}'])
def test_what_is_not_a_receipt_is_refused_by_name(tmp_path, content):
    path = receipt_path(str(tmp_path), "train", 0)
    write_receipt(path, receipt(tmp_path))
    with open(path, "wb") as file:
        file.write(content)
    with pytest.raises(ReceiptError, match=f"{path} is not a shard receipt"):
        read_receipt(path, "digest")
    assert read_receipt(receipt_path(str(tmp_path), "train", 1), "digest") is None  # none
