"""PyTorch users read the shards with the `tfrecord` package (README, "PyTorch"): its reader,
which its torch `TFRecordDataset` iterates, in a process without TensorFlow (the package's
own copy of TensorFlow's protos cannot load beside TensorFlow's), images decoded by Pillow.
"""

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


@pytest.mark.parametrize("fixture", ["sample_output", "gzip_output"])
def test_every_example_reads_without_tensorflow_to_tensorflow_s_pixels_and_labels(
        fixture, request, tmp_path):
    output = request.getfixturevalue(fixture)
    result = subprocess.run([sys.executable, "-c", READER, str(output), str(tmp_path / "r.npz")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    found = np.load(tmp_path / "r.npz")
    suffix = ".tfrecord.gz" if fixture == "gzip_output" else ".tfrecord"
    compression = "GZIP" if fixture == "gzip_output" else ""
    keys = set()
    for split in ("train", "validation", "test"):
        for index, example in enumerate(read_examples(f"{output}/{split}-*{suffix}",
                                                      compression)):
            stored = example.features.feature
            expected = decode(stored["image/encoded"].bytes_list.value[0])
            np.testing.assert_array_equal(found[f"{split}/{index}/pixels"], expected.numpy())
            assert found[f"{split}/{index}/label"].tolist() == list(
                stored["image/class/label"].int64_list.value)
            keys |= {f"{split}/{index}/pixels", f"{split}/{index}/label"}
    assert set(found.files) == keys  # every record, none twice
