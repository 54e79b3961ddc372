"""Shard receipts are JSON data: written whole, read back as the same records, and one that
is there but is not a receipt (a pickle, say, which would run code when loaded) is
refused by name instead of being loaded."""

import http.server
import json
import pickle
import re
import threading

import pytest

from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.naming import receipt_path
from image_tfrecords.core.records.receipts import (
    ReceiptError,
    ShardReceipt,
    read_receipt,
    write_receipt,
)
from image_tfrecords.core.records.records import (
    Box,
    ExampleContent,
    ExampleRef,
    Keypoints,
    ManifestRow,
    Mask,
    ShardOutcome,
    ShardWritten,
)


def receipt(tmp_path):
    shard = tmp_path / "train-00000.tfrecord"
    shard.write_bytes(b"records")
    row = ManifestRow(
        "m.csv",
        3,
        "raw",
        "train",
        "gs://b/\udcffé.jpg",
        ("cat",),
        (
            Box(0.1, 0.2, 0.3, 0.4, difficult=1),
            Box(0.1, 0.2, 0.3, 0.4, mask=Mask(40, 30, ((1.5, 2, 9, 2, 9, 7.25),))),
            Box(
                0.1,
                0.2,
                0.3,
                0.4,
                mask=Mask(40, 30, counts="PX05"),
                keypoints=Keypoints((0.2, 0.0), (0.3, 0.0), (2, 0), ("a", "b")),
            ),
        ),
        (7, 0.5, "x"),
        (40, 30),
    )
    ref = ExampleRef(
        "train",
        0,
        0,
        "m.csv",
        3,
        row.uri,
        ("cat",),
        (1 << 64) - 1,
        ExampleContent((row,), 123, "cmyk", 40),
    )
    written = ShardWritten(
        "train",
        0,
        str(shard),
        1,
        1,
        7,
        123,
        {"cat": 1},
        {"cmyk": 1},
        {"<=64": 1},
        {"<=1k": 1},
        {"masks": 1},
    )
    dead = DeadLetter("m.csv", 4, "raw", "gs://b/x.jpg", "train", "not_an_image", "no")
    return ShardReceipt(
        "digest", ShardOutcome(written, (dead,), (("ab" * 32, ref),)), ((str(shard), 7),)
    )


def test_a_receipt_reads_back_as_the_records_written(tmp_path):
    written = receipt(tmp_path)
    path = receipt_path(str(tmp_path), "train", 0)
    write_receipt(path, written)
    assert read_receipt(path, "digest") == written
    assert read_receipt(path, "other rows") is None  # made from other rows: written again
    (tmp_path / "train-00000.tfrecord").write_bytes(b"cut")
    assert read_receipt(path, "digest") is None  # its shard is not the size it says


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        pickle.dumps({"rows_digest": "digest"}),
        b'{"version": 1, "rows_digest": "digest"}',
    ],
)
def test_what_is_not_a_receipt_is_refused_by_name(tmp_path, content):
    path = receipt_path(str(tmp_path), "train", 0)
    write_receipt(path, receipt(tmp_path))
    with open(path, "wb") as file:
        file.write(content)
    with pytest.raises(ReceiptError, match=f"{path} is not a shard receipt"):
        read_receipt(path, "digest")
    assert read_receipt(receipt_path(str(tmp_path), "train", 1), "digest") is None  # none


class _CountingServer(http.server.ThreadingHTTPServer):
    """A real HTTP server that counts the requests it gets."""

    requests = 0


class _Counted(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.server.requests += 1
        self.send_response(200)
        self.send_header("Content-Length", "7")
        self.end_headers()
        self.wfile.write(b"records")

    do_HEAD = do_GET

    def log_message(self, *args):
        pass


@pytest.fixture
def counting_server():
    server = _CountingServer(("127.0.0.1", 0), _Counted)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _crafted(tmp_path, change) -> str:
    """A receipt vouching for its shard, then changed by `change(fields)` as someone who
    can write to the output folder would; returns its path."""
    path = receipt_path(str(tmp_path / "out" / ".tmp-0123456789ab"), "train", 0)
    temp_dir = tmp_path / "out" / ".tmp-0123456789ab"
    temp_dir.mkdir(parents=True)
    written = receipt(temp_dir)
    write_receipt(path, written)
    with open(path) as file:
        fields = json.load(file)
    change(fields)
    with open(path, "w") as file:
        json.dump(fields, file)
    return path


def _set(*place_and_value):
    *place, value = place_and_value

    def change(fields):
        holder = fields
        for key in place[:-1]:
            holder = holder[key]
        holder[place[-1]] = value

    return change


@pytest.mark.parametrize(
    "change",
    [
        _set("outcome", 0, 0, "../../elsewhere/x"),  # the shard's split: its published name
        _set("outcome", 2, 0, 1, 0, "train/../.."),  # an example's split: where its receipt is
        _set("outcome", 0, 2, "../../elsewhere/x.tfrecord"),  # the shard that is published
        _set("files", 0, 0, "../../elsewhere/x.tfrecord"),
        _set("files", 0, 0, "/etc/hostname"),
        _set("files", 0, 0, "thumbnails\\..\\..\\x"),
    ],
    ids=["split", "example split", "shard path", "file ..", "file absolute", "backslash"],
)
def test_a_receipt_naming_anything_outside_its_run_folder_is_refused_by_name(tmp_path, change):
    """A resumed run publishes a reused shard under its receipt's split and moves its
    receipt's temp path: a receipt naming `../..` would have it write outside the output."""
    path = _crafted(tmp_path, change)
    with pytest.raises(ReceiptError, match=re.escape(path)):
        read_receipt(path, "digest")
    assert not (tmp_path / "elsewhere").exists()


def test_a_receipt_naming_a_url_is_refused_without_a_request(tmp_path, counting_server):
    url = f"http://127.0.0.1:{counting_server.server_port}/train-00000.tfrecord"
    path = _crafted(tmp_path, _set("files", 0, 0, url))
    with pytest.raises(ReceiptError, match=re.escape(path) + ".*outside its run's temp folder"):
        read_receipt(path, "digest")
    assert counting_server.requests == 0


def test_a_receipt_names_its_files_within_its_run_folder(tmp_path):
    """Relative to the run's temp folder: a resume that spells the output folder another
    way (relative, absolute) finds the same files."""
    path = _crafted(tmp_path, lambda fields: None)
    with open(path) as file:
        fields = json.load(file)
    assert fields["files"] == [["train-00000.tfrecord", 7]]
    assert fields["outcome"][0][2] == "train-00000.tfrecord"
