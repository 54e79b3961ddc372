"""Grain (JAX) reads ArrayRecord outputs (docs/output/reading.md, "Grain (JAX)"): any record
by its index, the same as the sequential read, and the docs' loader as a user runs it."""

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import grain
from conftest import read_examples, shard_pattern, shard_records

READING = Path(__file__).resolve().parent.parent / "docs" / "output" / "reading.md"


def shard_paths(output, split):
    summary = json.loads((output / "summary.json").read_text())
    return [str(output / shard["file"]) for shard in summary["splits"][split]["shards"]]


def test_random_access_by_index_gives_the_records_of_the_sequential_read(sample_outputs):
    output = sample_outputs("array_record")
    for split in ("train", "validation", "test"):
        paths = shard_paths(output, split)
        sequential = [record for path in paths for record in shard_records(path)]
        source = grain.sources.ArrayRecordDataSource(paths)
        assert len(source) == len(sequential) > 0
        order = list(range(len(source)))
        random.Random(split).shuffle(order)
        assert {index: source[index] for index in order} == dict(enumerate(sequential))


def test_the_records_are_the_tfrecord_output_s_in_the_same_order(sample_outputs):
    """The same rows give the same serialized examples whatever the format."""
    for split in ("train", "validation", "test"):
        tfrecord = read_examples(shard_pattern(sample_outputs("tfrecord"), split))
        array_record = read_examples(shard_pattern(sample_outputs("array_record"), split))
        assert array_record == tfrecord and array_record


def test_the_docs_loader_batches_every_train_example_with_its_label(sample_outputs):
    output = sample_outputs("array_record")
    block = re.search(
        r"## Grain \(JAX\)\n.*?```python\n(.*?)```", READING.read_text(), re.DOTALL
    ).group(1)
    code = block.replace('output = "out"', f"output = {str(output)!r}").replace(
        "    ...", "    seen.append((batch['image'].shape, batch['label'].tolist()))"
    )
    code = "seen = []\n" + code + "print(__import__('json').dumps(seen))\n"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    batches = json.loads(result.stdout.splitlines()[-1])
    assert [shape for shape, _ in batches] == [[31, 64, 64, 3]]  # 31 train examples
    labels = [label for _, ids in batches for label in ids]
    stored = [
        example.features.feature["image/class/label"].int64_list.value[0]
        for example in read_examples(shard_pattern(output, "train"))
    ]
    assert sorted(labels) == sorted(stored) and labels != stored  # all of them, shuffled
