"""PyTorch users read the shards with the `tfrecord` package (README, "PyTorch"): its reader,
which its torch `TFRecordDataset` iterates, in a process without TensorFlow (the package's
own copy of TensorFlow's protos cannot load beside TensorFlow's), images decoded by Pillow.
"""

import hashlib
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

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
    fixture, request, tmp_path
):
    output = request.getfixturevalue(fixture)
    result = subprocess.run(
        [sys.executable, "-c", READER, str(output), str(tmp_path / "r.npz")],
        capture_output=True,
        text=True,
        timeout=120,
    )
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
                stored["image/class/label"].int64_list.value
            )
            keys |= {f"{split}/{index}/pixels", f"{split}/{index}/label"}
    assert set(found.files) == keys  # every record, none twice


# The docs' PyTorch recipe, its reading half (torch is not installed: its IterableDataset
# only passes each DataLoader worker's number to read_split), as 1 and as 3 workers.
RECIPE_PAGES = ("docs/output/reading.md", "docs/getting-started.md")
RECIPE_RUN = """
import hashlib
workers_counts = [int(count) for count in sys.argv[2].split(",")]
seen = {}
for workers in workers_counts:
    for split in summary["splits"]:
        for worker in range(workers):
            for example in read_split(split, worker, workers):
                pixels, label = decode(example)
                seen.setdefault(f"{workers}/{split}", []).append(
                    [worker, hashlib.sha256(example["image/encoded"]).hexdigest(),
                     list(pixels.shape)])
print(json.dumps(seen))
"""


def recipe(page: str) -> str:
    """The page's block that defines read_split, reading the output named on the command
    line, in a process where TensorFlow cannot be imported."""
    text = (Path(__file__).parent.parent / page).read_text(encoding="utf-8")
    (block,) = [
        code for code in re.findall(r"```python\n(.*?)```", text, re.S) if "def read_split" in code
    ]
    block, replaced = re.subn(r'^output = "[^"]*"$', "output = sys.argv[1]", block, flags=re.M)
    assert replaced == 1
    return 'import sys\nsys.modules["tensorflow"] = None\n' + block + RECIPE_RUN


# multi_label_output: its validation split is one shard of one record (as --num_shards
# larger than the data writes), its TRAIN one of three.
@pytest.mark.parametrize("fixture", ["tfrecord_output", "gzip_output", "multi_label_output"])
def test_the_docs_pytorch_recipe_reads_every_example_once_as_any_number_of_workers(
    fixture, request
):
    output = request.getfixturevalue(fixture)
    result = subprocess.run(
        [sys.executable, "-c", recipe(RECIPE_PAGES[0]), str(output), "1,3"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    summary = json.loads((output / "summary.json").read_text())
    records = {
        split: [shard["records"] for shard in stats["shards"]]
        for split, stats in summary["splits"].items()
    }
    if fixture == "multi_label_output":  # the test means what it says
        assert records["validation"] == [1]
    for split, stats in summary["splits"].items():
        in_order = [
            hashlib.sha256(
                example.features.feature["image/encoded"].bytes_list.value[0]
            ).hexdigest()
            for shard in stats["shards"]
            for example in read_examples(str(output / shard["file"]))
        ]
        for workers in (1, 3):
            read = seen.get(f"{workers}/{split}", [])
            # Every example once, each worker's in the shards' order; decoded to 64x64 RGB.
            assert Counter(digest for _, digest, _ in read) == Counter(in_order), (split, workers)
            for worker in range(workers):
                mine = [digest for part, digest, _ in read if part == worker]
                assert mine == [digest for digest in in_order if digest in mine]
            assert all(shape == [3, 64, 64] for _, _, shape in read)
        # Three workers part every shard of three records or more (by its index).
        if any(count >= 3 for count in records[split]):
            assert {part for part, _, _ in seen[f"3/{split}"]} == {0, 1, 2}


def test_the_pages_give_the_same_pytorch_recipe():
    """What the test above runs is what getting-started shows too (apart from its folder)."""
    assert len({recipe(page) for page in RECIPE_PAGES}) == 1
