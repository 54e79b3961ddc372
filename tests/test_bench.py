"""The bench's two hand-written baselines write the same examples, and the right ones.

write_bench.py compares ours against both and checks the examples agree at bench time;
this holds the baselines to each other and to the images on a tiny manifest, run as the
bench runs them: as scripts, in child processes.
"""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

from conftest import encode, feature, photo_like, read_examples, shard_pattern

BENCH = Path(__file__).resolve().parent.parent / "bench"
# (split, file, label, format, mode, width, height)
IMAGES = [
    ("TRAIN", "cats/a.jpg", "cat", "JPEG", "RGB", 40, 30),
    ("train", "dogs/b.png", "dog", "PNG", "RGB", 24, 36),
    ("TRAIN", "c.jpg", "owl", "JPEG", "L", 33, 20),
    ("train", "d.jpg", "cat", "JPEG", "RGB", 20, 20),
    ("train", "e.jpg", "dog", "JPEG", "RGB", 50, 10),
    ("validation", "f.jpg", "owl", "JPEG", "RGB", 16, 16),
    ("validation", "g.png", "cat", "PNG", "L", 12, 18),
    ("test", "h.jpg", "dog", "JPEG", "RGB", 30, 30),
    ("test", "i.jpg", "cat", "JPEG", "RGB", 26, 14),
]


def write_manifest(folder: Path) -> Path:
    for seed, (_, name, _, fmt, mode, width, height) in enumerate(IMAGES):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(encode(photo_like(width, height, seed, mode), fmt))
    manifest = folder / "manifest.csv"
    manifest.write_text("".join(f"{split},{name},{label}\n" for split, name, label, *_ in IMAGES))
    return manifest


def features_by_split(output: Path) -> dict[str, list[dict]]:
    """Every example's features, per split (the file name up to its first - or .)."""
    examples: dict[str, list[dict]] = {}
    for path in sorted(output.glob("*.tfrecord")):
        split = path.name.split("-")[0].split(".")[0]
        for example in read_examples(str(path)):
            examples.setdefault(split, []).append(
                {key: feature(example, key) for key in example.features.feature}
            )
    return {
        split: sorted(found, key=lambda features: features["image/source_id"])
        for split, found in examples.items()
    }


def test_the_process_pool_writes_the_loops_examples_in_a_shard_per_worker(tmp_path):
    manifest = write_manifest(tmp_path / "data")
    scripts = {"loop": ["handwritten.py"], "pool": ["process_pool.py", "--workers", "2"]}
    runs = {
        tool: subprocess.Popen(
            [
                sys.executable,
                str(BENCH / script),
                *flags,
                "--manifest",
                str(manifest),
                "--output_dir",
                str(tmp_path / tool),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tool, (script, *flags) in scripts.items()
    }
    printed = {}
    for tool, run in runs.items():
        stdout, stderr = run.communicate(timeout=120)
        assert run.returncode == 0, stderr
        printed[tool] = stdout.strip()
    assert printed == dict.fromkeys(runs, "wrote 9 examples: test 2, train 5, validation 2")

    # Each split in as many shards as workers, rows in manifest order.
    assert sorted(path.name for path in (tmp_path / "pool").iterdir()) == [
        f"{split}-0000{index}-of-00002.tfrecord"
        for split in ("test", "train", "validation")
        for index in (0, 1)
    ]
    first_train_shard = read_examples(str(tmp_path / "pool" / "train-00000-of-00002.tfrecord"))
    assert [feature(example, "image/filename") for example in first_train_shard] == [
        b"a.jpg",
        b"b.png",
    ]

    loop, pool = (features_by_split(tmp_path / tool) for tool in runs)
    assert pool == loop
    label_ids = {"cat": 0, "dog": 1, "owl": 2}  # the sorted TRAIN labels
    expected = {}
    for split, name, label, fmt, mode, width, height in IMAGES:
        path = tmp_path / "data" / name
        expected.setdefault(split.lower(), []).append(
            {
                "image/encoded": path.read_bytes(),
                "image/format": fmt.lower().encode(),
                "image/height": height,
                "image/width": width,
                "image/channels": len(mode),
                "image/filename": path.name.encode(),
                "image/source_id": str(path).encode(),
                "image/key/sha256": hashlib.sha256(path.read_bytes()).hexdigest().encode(),
                "image/class/label": label_ids[label],
                "image/class/text": label.encode(),
            }
        )
    assert loop == {
        split: sorted(found, key=lambda features: features["image/source_id"])
        for split, found in expected.items()
    }


def test_the_bench_lists_the_examples_of_our_output_as_of_the_baselines(tfrecord_output):
    """write_bench.py compares outputs through read_records.py: ours has an index beside
    each shard, which is no shard to read."""
    result = subprocess.run(
        [sys.executable, str(BENCH / "read_records.py"), str(tfrecord_output)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    listed = [json.loads(line) for line in result.stdout.splitlines()]
    assert sorted(sha256 for _, _, sha256, _ in listed) == sorted(
        feature(example, "image/key/sha256").decode()
        for example in read_examples(shard_pattern(tfrecord_output))
    )
    assert len(listed) == 43
