"""Near-copies: planted copies found across and within splits, distinct photos not paired,
the same pairs on every run and in every input order, and --dedupe near."""

import collections
import hashlib
import itertools
import json
import random

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to
from conftest import convert, encode, feature, read_examples
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image, ImageDraw, ImageEnhance, ImageFilter

from image_tfrecords.core.records.copies import HASH_BITS
from image_tfrecords.core.records.naming import receipt_path, shard_path
from image_tfrecords.core.records.receipts import ShardReceipt, write_receipt
from image_tfrecords.core.records.records import (
    ExampleRef,
    ShardExamples,
    ShardOutcome,
    ShardWritten,
)
from image_tfrecords.core.records.run_settings import RunSettings
from image_tfrecords.core.records.workers import Workers
from image_tfrecords.pipeline import run
from image_tfrecords.transforms.near_duplicates import FindNearDuplicates, band_masks, near_order


def scene(seed: int, size=(192, 144)) -> Image.Image:
    """A distinct picture per seed: a gradient sky, shapes of random colours, blur, grain."""
    rng = np.random.default_rng(seed)
    width, height = size
    top, bottom = rng.integers(0, 256, 3), rng.integers(0, 256, 3)
    ramp = np.linspace(0, 1, height)[:, None, None]
    pixels = np.broadcast_to(top + (bottom - top) * ramp, (height, width, 3))
    image = Image.fromarray(pixels.astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(4, 9))):
        box = sorted(rng.integers(0, width, 2)) + sorted(rng.integers(0, height, 2))
        shape = (box[0], box[2], box[1] + 8, box[3] + 8)
        fill = tuple(int(c) for c in rng.integers(0, 256, 3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)(shape, fill=fill)
    image = image.filter(ImageFilter.GaussianBlur(1.5))
    grain = rng.normal(0, 6, (height, width, 3))
    return Image.fromarray(np.clip(np.asarray(image) + grain, 0, 255).astype(np.uint8))


def cropped(image: Image.Image, fraction: float) -> Image.Image:
    dx, dy = round(image.width * fraction), round(image.height * fraction)
    return image.crop((dx, dy, image.width - dx, image.height - dy))


# How each planted copy is made from its original (a JPEG at quality 90).
PLANTED = {
    "resized": lambda im: encode(
        im.resize((im.width // 2, im.height // 2), Image.LANCZOS), "JPEG", quality=90
    ),
    "recompressed": lambda im: encode(im, "JPEG", quality=40),
    "resaved_png": lambda im: encode(im, "PNG"),
    "cropped": lambda im: encode(cropped(im, 0.03), "JPEG", quality=90),
    "brighter": lambda im: encode(ImageEnhance.Brightness(im).enhance(1.15), "JPEG", quality=90),
    "darker": lambda im: encode(ImageEnhance.Brightness(im).enhance(0.85), "JPEG", quality=90),
}
DISTINCT = 40


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """TRAIN: 40 distinct scenes and one near-copy of scene 0. TEST: a planted copy of
    scenes 1-6 (a leak each), 8 more distinct scenes and a byte-identical copy of
    scene 7 (reported as a duplicate, not a near-copy)."""
    root = tmp_path_factory.mktemp("near")
    rows = []

    def add(split, name, data, label):
        (root / name).write_bytes(data)
        rows.append(f"{split},{name},{label}")

    for seed in range(DISTINCT):
        add(
            "TRAIN", f"scene{seed}.jpg", encode(scene(seed), "JPEG", quality=90), f"class{seed % 3}"
        )
    add("TRAIN", "scene0_small.jpg", PLANTED["resized"](scene(0)), "class0")
    for seed, (how, make) in enumerate(PLANTED.items(), start=1):
        add(
            "TEST",
            f"scene{seed}_{how}.{'png' if how.endswith('png') else 'jpg'}",
            make(scene(seed)),
            f"class{seed % 3}",
        )
    for seed in range(DISTINCT, DISTINCT + 8):
        add("TEST", f"scene{seed}.jpg", encode(scene(seed), "JPEG", quality=90), "class0")
    add("TEST", "scene7_copy.jpg", (root / "scene7.jpg").read_bytes(), "class1")
    (root / "m.csv").write_text("\n".join(rows) + "\n")
    return root / "m.csv"


def converted(manifest, output, *flags):
    """summary.json and the near_duplicates lines of a run."""
    convert(output, "--manifest", str(manifest), "--max_error_fraction", "0.5", *flags)
    summary = json.loads((output / "summary.json").read_text())
    lines = [
        line
        for name in summary["near_duplicates"]["files"]
        for line in (output / name).read_text().splitlines()
    ]
    return summary, lines


def names(lines):
    """{(kept file, copy file)} of near_duplicates lines."""
    return {
        (
            json.loads(line)["kept"]["uri"].rsplit("/", 1)[1],
            json.loads(line)["copy"]["uri"].rsplit("/", 1)[1],
        )
        for line in lines
    }


PLANTED_PAIRS = {
    ("scene0.jpg", "scene0_small.jpg"),
    *(
        (f"scene{seed}.jpg", f"scene{seed}_{how}.{'png' if how.endswith('png') else 'jpg'}")
        for seed, how in enumerate(PLANTED, start=1)
    ),
}


def test_planted_copies_are_found_and_distinct_scenes_are_not_paired(corpus, tmp_path, capsys):
    summary, lines = converted(corpus, tmp_path / "out")
    assert names(lines) == PLANTED_PAIRS
    assert summary["near_duplicates"] == {
        "copies": 7,
        "by_splits": {"train/test": 6, "train/train": 1},
        "max_distance": 10,
        "dropped": False,
        "files": ["near_duplicates-00000-of-00001.jsonl"],
    }
    # The byte-identical copy is a duplicate, and not a near-copy as well.
    assert summary["duplicates"]["by_splits"] == {"train/test": 1}
    first = json.loads(next(line for line in lines if "scene1_" in line))
    assert first["kept"]["split"] == "train" and first["copy"]["split"] == "test"
    assert first["kept"]["labels"] == ["class1"] and first["copy"]["labels"] == ["class1"]
    assert first["dropped"] is False
    for line in map(json.loads, lines):  # the distance is the hashes' own
        apart = int(line["kept"]["perceptual_hash"], 16) ^ int(line["copy"]["perceptual_hash"], 16)
        assert apart.bit_count() == line["distance"] <= 10
    table = capsys.readouterr().out
    assert (
        "near-copies (pHash within 10 bits): train/test 6 (leak), train/train 1  "
        "(near_duplicates-00000-of-00001.jsonl)"
    ) in table.splitlines()


def test_the_pairs_are_the_same_on_every_run(corpus, tmp_path):
    _, first = converted(corpus, tmp_path / "one")
    _, second = converted(corpus, tmp_path / "two", "--num_shards", "3")
    assert sorted(first) == sorted(second)


def test_a_smaller_distance_finds_fewer_and_zero_only_equal_hashes(corpus, tmp_path):
    summary, lines = converted(corpus, tmp_path / "out", "--near_duplicate_distance", "0")
    assert all(json.loads(line)["distance"] == 0 for line in lines)
    assert summary["near_duplicates"]["copies"] == len(lines) < 7


def test_dedupe_near_drops_the_copies_and_keeps_train(corpus, tmp_path):
    summary, lines = converted(corpus, tmp_path / "out", "--dedupe", "near")
    assert summary["errors"]["by_reason"] == {"duplicate_image": 1, "near_duplicate_image": 7}
    assert summary["accounted"] and summary["rows_read"] == DISTINCT + 1 + 6 + 8 + 1
    assert summary["near_duplicates"]["dropped"] and summary["duplicates"]["dropped"]
    written = {
        split: sorted(
            feature(e, "image/filename").decode()
            for e in read_examples(f"{tmp_path}/out/{split}-*.tfrecord")
        )
        for split in ("train", "test")
    }
    assert written["train"] == sorted(f"scene{seed}.jpg" for seed in range(DISTINCT))
    assert written["test"] == sorted(f"scene{seed}.jpg" for seed in range(DISTINCT, DISTINCT + 8))
    errors = [
        json.loads(line)
        for name in summary["errors"]["files"]
        for line in (tmp_path / "out" / name).read_text().splitlines()
    ]
    (small,) = [e for e in errors if e["uri"].endswith("scene0_small.jpg")]
    assert small["reason"] == "near_duplicate_image"
    assert (
        "a near-copy (perceptual hash" in small["message"]
        and "scene0.jpg (train" in small["message"]
    )
    assert all(json.loads(line)["dropped"] for line in lines)


def test_a_distance_out_of_range_is_refused_naming_the_option(corpus, tmp_path, capsys):
    assert (
        run.main(
            [
                "--manifest",
                str(corpus),
                "--output_dir",
                str(tmp_path / "out"),
                "--near_duplicate_distance",
                "21",
            ]
        )
        == 2
    )
    assert "--near_duplicate_distance must be 0 to 20 bits" in capsys.readouterr().err


# The search itself, against all pairs compared one by one.


@given(st.integers(0, 20), st.randoms(use_true_random=False))
def test_bands_cover_the_hash_and_close_hashes_share_one(max_distance, rng):
    masks = band_masks(max_distance)
    assert len(masks) == max_distance + 1
    assert sum(masks) == (1 << HASH_BITS) - 1 and all(
        a & b == 0 for a, b in itertools.combinations(masks, 2)
    )
    first = rng.getrandbits(HASH_BITS)
    flipped = sum(1 << bit for bit in rng.sample(range(HASH_BITS), max_distance))
    assert any(first & mask == (first ^ flipped) & mask for mask in masks)


def ref(index, split, phash):
    return ExampleRef(
        split, index % 4, index, "m.csv", index, f"img{index}.jpg", ("x",), phash, None
    )


def every_pair(keyed, max_distance):
    """The reference: for each example, its preferred earlier near-copy, all pairs tried."""
    found = {}
    refs = sorted(keyed, key=lambda k: near_order(*k))
    for later, (sha, copy) in enumerate(refs):

        def distance(kept):
            return (kept.perceptual_hash ^ copy.perceptual_hash).bit_count()

        candidates = [
            (kept_sha, kept)
            for kept_sha, kept in refs[:later]
            if kept_sha != sha and distance(kept) <= max_distance
        ]
        if candidates:
            _, kept = min(
                candidates, key=lambda k: (near_order(*k)[0], distance(k[1]), near_order(*k))
            )
            found[copy.uri] = (kept.uri, distance(kept))
    return found


def with_receipts(temp_dir, keyed):
    """The examples as the shard writer gives them, a ShardExamples per shard, with the
    receipts it would have left for their shards (where the search reads the refs of the
    pairs it finds)."""
    by_shard = collections.defaultdict(list)
    for sha, example in keyed:
        by_shard[example.split, example.shard].append((sha, example))
    for (split, shard), keys in by_shard.items():
        written = ShardWritten(
            split,
            shard,
            shard_path(str(temp_dir), split, shard, ".tfrecord"),
            len(keys),
            len(keys),
            0,
            0,
            {},
            {},
            {},
            {},
            {},
        )
        write_receipt(
            receipt_path(str(temp_dir), split, shard),
            ShardReceipt("", ShardOutcome(written, (), tuple(keys)), ()),
        )
    return [ShardExamples(split, shard, tuple(keys)) for (split, shard), keys in by_shard.items()]


def assert_search_finds(temp_dir, keyed, max_distance, expected, workers=Workers(0)):
    """The search in this process, or with `workers` its groups in worker processes; with
    Beam's runtime type checks, each element against the type its step declares
    (tests/test_coders.py)."""
    with beam.Pipeline(options=PipelineOptions(["--runtime_type_check"])) as p:
        found = (
            p
            | beam.Create(with_receipts(temp_dir, keyed))
            | FindNearDuplicates(max_distance, str(temp_dir), RunSettings(workers=workers))
            | beam.FlatMap(
                lambda batch: ((near.copy.uri, (near.kept.uri, near.distance)) for near in batch)
            )
        )
        assert_that(found, equal_to(list(expected.items())))


@pytest.mark.parametrize("max_distance", [0, 4, 10])
def test_the_band_search_finds_what_comparing_every_pair_finds(max_distance, tmp_path):
    rng = random.Random(max_distance)
    # Clusters around a few centres (many candidates per band value) plus loners, some
    # hashes equal, some examples byte-identical (the same sha256): never near-copies.
    centres = [rng.getrandbits(64) for _ in range(6)]
    keyed = []
    for index in range(300):
        phash = rng.choice(centres) if index % 3 else rng.getrandbits(64)
        for bit in rng.sample(range(64), rng.randint(0, 14)):
            phash ^= 1 << bit
        content = index // 2 if index % 10 == 0 else index
        sha = hashlib.sha256(str(content).encode()).hexdigest()
        keyed.append((sha, ref(index, rng.choice(("train", "validation", "test")), phash)))
    expected = every_pair(keyed, max_distance)
    assert expected  # the case is not vacuous
    assert_search_finds(tmp_path, keyed, max_distance, expected)
    rng.shuffle(keyed)
    assert_search_finds(tmp_path, keyed, max_distance, expected, Workers(2))
