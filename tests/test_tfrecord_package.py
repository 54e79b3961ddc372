"""PyTorch users read the shards with the `tfrecord` package (README, "PyTorch"): its reader,
which its torch `TFRecordDataset` iterates, in a process without TensorFlow (the package's
own copy of TensorFlow's protos cannot load beside TensorFlow's), images decoded by Pillow.
"""

import hashlib
import json
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import read_examples

# What the README's PyTorch reader does, minus torch: every split, every shard in order.
READER = """
import io, json, sys
sys.modules["tensorflow"] = None  # as on a machine without TensorFlow
import numpy as np
from PIL import Image
from tfrecord.reader import tfrecord_loader

output = sys.argv[1]
summary = json.load(open(f"{output}/summary.json"))
compression = "gzip" if summary["options"]["compression"] == "gzip" else None
found = {}
for split, stats in summary["splits"].items():
    records = (features for shard in stats["shards"] for features in tfrecord_loader(
        f"{output}/{shard['file']}", None, {"image/encoded": "byte", "image/class/label": "int"},
        compression_type=compression))
    for index, features in enumerate(records):
        image = Image.open(io.BytesIO(features["image/encoded"])).convert("RGB")
        found[f"{split}/{index}/pixels"] = np.asarray(image)
        found[f"{split}/{index}/label"] = features["image/class/label"]
np.savez(sys.argv[2], **found)
"""


def decode(encoded):
    """TensorFlow's pixels; for JPEG with the accurate integer IDCT, as Pillow decodes
    (TensorFlow's default, the fast one, differs by a few levels)."""
    if encoded.startswith(b"\xff\xd8"):
        return tf.io.decode_jpeg(encoded, channels=3, dct_method="INTEGER_ACCURATE")
    return tf.io.decode_image(encoded, channels=3)


@pytest.mark.parametrize("fixture", ["tfrecord_output", "gzip_output"])
def test_every_example_reads_without_tensorflow_to_tensorflow_s_pixels_and_labels(
        fixture, request, tmp_path):
    output = request.getfixturevalue(fixture)
    result = subprocess.run([sys.executable, "-c", READER, str(output), str(tmp_path / "r.npz")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    found = np.load(tmp_path / "r.npz")
    suffix = ".tfrecord.gz" if fixture == "gzip_output" else ".tfrecord"
    keys = set()
    for split in ("train", "validation", "test"):
        for index, example in enumerate(read_examples(f"{output}/{split}-*{suffix}")):
            stored = example.features.feature
            expected = decode(stored["image/encoded"].bytes_list.value[0])
            np.testing.assert_array_equal(found[f"{split}/{index}/pixels"], expected.numpy())
            assert found[f"{split}/{index}/label"].tolist() == list(
                stored["image/class/label"].int64_list.value)
            keys |= {f"{split}/{index}/pixels", f"{split}/{index}/label"}
    assert set(found.files) == keys  # every record, none twice


# What the README's PyTorch reader does with several DataLoader workers: each worker reads
# its part of every shard, found through the shard's .idx, with no pass of its own.
INDEXED_READER = """
import hashlib, json, sys
sys.modules["tensorflow"] = None  # as on a machine without TensorFlow
from tfrecord.reader import tfrecord_loader

output, workers = sys.argv[1], int(sys.argv[2])
summary = json.load(open(f"{output}/summary.json"))
compression = "gzip" if summary["options"]["compression"] == "gzip" else None
seen = []
for stats in summary["splits"].values():
    for shard in stats["shards"]:
        (index,) = shard["companions"]
        # tfrecord 1.14 cannot read a one-line index (README): such a shard is read whole,
        # by one worker. Which shards hold one record depends on the rows' paths.
        parts = workers if shard["records"] > 1 else 1
        for worker in range(parts):
            for features in tfrecord_loader(
                    f"{output}/{shard['file']}", f"{output}/{index}" if parts > 1 else None,
                    {"image/encoded": "byte"}, shard=(worker, parts) if parts > 1 else None,
                    compression_type=compression):
                seen.append([shard["file"], worker,
                             hashlib.sha256(features["image/encoded"]).hexdigest()])
json.dump(seen, sys.stdout)
"""


@pytest.mark.parametrize("fixture", ["tfrecord_output", "gzip_output"])
def test_workers_splitting_shards_by_their_index_read_every_example_once(fixture, request):
    output = request.getfixturevalue(fixture)
    workers = 3
    result = subprocess.run([sys.executable, "-c", INDEXED_READER, str(output), str(workers)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    summary = json.loads((output / "summary.json").read_text())
    for stats in summary["splits"].values():
        for shard in stats["shards"]:
            in_order = [hashlib.sha256(example.features.feature["image/encoded"]
                                       .bytes_list.value[0]).hexdigest()
                        for example in read_examples(str(output / shard["file"]))]
            parts = [[digest for file, worker, digest in seen
                      if file == shard["file"] and worker == part] for part in range(workers)]
            # Each worker a contiguous part (none empty where there are enough records),
            # together the shard once, in order.
            assert sum(parts, []) == in_order, shard["file"]
            assert all(parts) or len(in_order) < workers, shard["file"]
