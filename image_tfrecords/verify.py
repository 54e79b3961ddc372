"""`verify(OUTPUT)`: reads every shard back and checks it against what summary.json says.

Per record: the CRCs, the example parsed with the spec readers use, every image decoded
(and its size, channels and SHA-256 as the example states them), every label id within
the vocabulary and naming the label text beside it. Per shard and split: the record
counts, and no shard file that summary.json does not list. The first problem is raised
as a VerifyError naming the shard and record.
"""

from __future__ import annotations

import dataclasses
import hashlib
import posixpath

import numpy as np
import tensorflow as tf

from image_tfrecords.core.file_formats import GFiles, RecordError
from image_tfrecords.core.records.feature_keys import (
    HEIGHT,
    KEYPOINT,
    LABEL_ID_BASE,
    LABEL_TEXT,
    MASKS,
    OBJECT_LABEL,
    SEGMENTATION,
    WIDTH,
)
from image_tfrecords.core.records.naming import shard_globs
from image_tfrecords.output import Output

_KEYPOINT_NUM = f"{KEYPOINT}num"


class VerifyError(ValueError):
    """The first problem found, naming its file (and record, where there is one)."""


@dataclasses.dataclass(frozen=True)
class Verified:
    """What was checked: examples per split and the number of shard files."""

    examples: dict[str, int]
    shards: int


def verify(output_dir: str) -> Verified:
    """Raises VerifyError at the first problem."""
    output = Output.read(output_dir)
    check = _ExampleCheck(output)
    examples: dict[str, int] = {}
    shards = 0
    for split, stats in output.summary.splits.items():
        listed = output.shards(split)
        companions = {
            path: [output.path(name) for name in shard.companions]
            for (path, _), shard in zip(listed, stats.shards)
        }
        _check_no_unlisted_shards(
            output,
            split,
            {path for path, _ in listed}
            | {path for paths in companions.values() for path in paths},
        )
        for path, expected in listed:
            name = posixpath.basename(path)
            if not tf.io.gfile.exists(path):
                raise VerifyError(f"{name}: listed in summary.json but missing")
            sizes = _verify_shard(output, path, check, name)
            if len(sizes) != expected:
                raise VerifyError(f"{name}: {len(sizes)} records, summary.json says {expected}")
            _verify_companions(output, path, companions[path], sizes)
        examples[split] = sum(records for _, records in listed)
        shards += len(listed)
        if examples[split] != stats.examples:
            raise VerifyError(
                f"split {split}: its shards hold {examples[split]} records, "
                f"summary.json says {stats.examples} examples"
            )
    if sum(examples.values()) != output.summary.examples_written:
        raise VerifyError(
            f"the splits hold {sum(examples.values())} examples, summary.json "
            f"says {output.summary.examples_written} were written"
        )
    return Verified(examples, shards)


def _verify_shard(output: Output, path: str, check: _ExampleCheck, name: str) -> list[int]:
    """Checks every record of one shard; returns their sizes in bytes, in order."""
    sizes: list[int] = []
    try:
        for record in output.read_shard(path):
            sizes.append(len(record))
            check(record)
    except RecordError as problem:
        raise VerifyError(f"{name}: {problem}") from problem
    except ValueError as problem:
        raise VerifyError(f"{name}: record {len(sizes) - 1}: {problem}") from problem
    return sizes


def _verify_companions(
    output: Output, shard: str, companions: list[str], record_sizes: list[int]
) -> None:
    """The files beside a shard (a TFRecord shard's .idx) are there and agree with its
    records (of `record_sizes` bytes)."""
    if not companions:
        return
    names = ", ".join(posixpath.basename(path) for path in companions)
    for path in companions:
        if not tf.io.gfile.exists(path):
            raise VerifyError(f"{posixpath.basename(path)}: listed in summary.json but missing")
    try:
        output.shard_format.check_companions(shard, GFiles(), record_sizes)
    except ValueError as problem:
        raise VerifyError(f"{names}: {problem}") from problem


def _check_no_unlisted_shards(output: Output, split: str, listed: set[str]) -> None:
    for path in (
        found for glob in shard_globs(split) for found in tf.io.gfile.glob(output.path(glob))
    ):
        if path not in listed:
            raise VerifyError(
                f"{posixpath.basename(path)}: a shard file summary.json does not list"
            )


class _ExampleCheck:
    """Checks one serialized example; raises ValueError saying what is wrong."""

    def __init__(self, output: Output) -> None:
        self._spec = output.parse_spec()
        self._images = output.image_keys
        self._vocabulary = output.vocabulary
        self._num_classes = output.num_classes
        self._labels = [key for key in LABEL_ID_BASE if key in output.features]

    def __call__(self, record: bytes) -> None:
        try:
            example = tf.io.parse_single_example(record, self._spec)
        except tf.errors.InvalidArgumentError as problem:
            raise ValueError(
                f"not an example of the features summary.json lists: "
                f"{problem.message.splitlines()[0]}"
            ) from problem
        values = {key: value.numpy() for key, value in example.items()}
        for key in self._images:
            self._check_image(key, values)
        for key in self._labels:
            self._check_labels(key, values)
        if MASKS in values:
            self._check_masks(values)
        if SEGMENTATION in values:
            self._check_segmentation(values)
        if _KEYPOINT_NUM in values:
            self._check_keypoints(values)

    @staticmethod
    def _check_image(key: str, values: dict[str, np.ndarray]) -> None:
        """Decodes the image; checks the size, channels and SHA-256 its example states
        (`image/height` etc. for `image/encoded`, where the example has them)."""
        encoded = values[key]
        try:
            shape = tf.io.decode_image(encoded, expand_animations=False).shape
        except tf.errors.InvalidArgumentError as problem:
            raise ValueError(f"{key} does not decode: {problem.message}") from problem
        prefix = key.removesuffix("/encoded")
        for dimension, size in zip(("height", "width", "channels"), shape):
            stated = values.get(f"{prefix}/{dimension}")
            if stated is not None and stated != size:
                raise ValueError(
                    f"{key} decodes with {dimension} {size}, {prefix}/{dimension} says {stated}"
                )
        digest = values.get(f"{prefix}/key/sha256")
        if digest is not None and digest.decode() != hashlib.sha256(encoded).hexdigest():
            raise ValueError(f"{key} does not match {prefix}/key/sha256")

    @staticmethod
    def _check_masks(values: dict[str, np.ndarray]) -> None:
        """One mask per object, each a PNG of 0s and 1s at the image's size; or none, where
        no object of the example has one (beside examples whose objects do)."""
        masks, objects = values[MASKS], len(values[OBJECT_LABEL])
        if len(masks) and len(masks) != objects:
            raise ValueError(f"{len(masks)} masks in {MASKS} for {objects} objects")
        size = (values[HEIGHT], values[WIDTH])
        for number, mask in enumerate(masks):
            try:
                pixels = tf.io.decode_png(mask).numpy()
            except tf.errors.InvalidArgumentError as problem:
                raise ValueError(
                    f"{MASKS} {number} does not decode: {problem.message}"
                ) from problem
            if pixels.shape[:2] != size or pixels.shape[2] != 1:
                raise ValueError(
                    f"{MASKS} {number} is {pixels.shape[1]}x{pixels.shape[0]}"
                    f"x{pixels.shape[2]}, the image {size[1]}x{size[0]}x1"
                )
            if pixels.max(initial=0) > 1:
                raise ValueError(f"{MASKS} {number} holds values other than 0 and 1")

    @staticmethod
    def _check_segmentation(values: dict[str, np.ndarray]) -> None:
        """The segmentation map is one channel at the image's size."""
        shape = tf.io.decode_png(values[SEGMENTATION]).shape
        size = (values[HEIGHT], values[WIDTH])
        if tuple(shape) != (*size, 1):
            raise ValueError(
                f"{SEGMENTATION} is {shape[1]}x{shape[0]}x{shape[2]}, the image "
                f"{size[1]}x{size[0]}x1"
            )

    @staticmethod
    def _check_keypoints(values: dict[str, np.ndarray]) -> None:
        """K points per object in every keypoint list, and one `num` per object: a count,
        not checked against the visibilities (it is the source's own `num_keypoints`
        where it gives one, which CrowdPose's is not)."""
        counts, visibility = values[_KEYPOINT_NUM], values[f"{KEYPOINT}visibility"]
        objects = len(values[OBJECT_LABEL])
        left = len(visibility) % objects if objects else len(visibility)
        lists = [
            f"{KEYPOINT}{key}"
            for key in ("x", "y", "visibility", "text")
            if f"{KEYPOINT}{key}" in values
        ]
        if (
            left
            or len(counts) != objects
            or any(len(values[key]) != len(visibility) for key in lists)
        ):
            raise ValueError(
                f"{objects} objects, but {len(counts)} values in "
                f"{_KEYPOINT_NUM} and " + ", ".join(f"{len(values[key])} in {key}" for key in lists)
            )
        if (counts < 0).any():
            raise ValueError(f"{_KEYPOINT_NUM} holds a negative count: {counts.tolist()}")

    def _check_labels(self, key: str, values: dict[str, np.ndarray]) -> None:
        """Every id is a vocabulary id (or the OOV id); its text is that entry's label."""
        base = LABEL_ID_BASE[key]
        ids = (np.atleast_1d(values[key]) - base).tolist()
        for label_id in ids:
            if not 0 <= label_id < self._num_classes:
                raise ValueError(
                    f"{key} {label_id + base} is outside the vocabulary "
                    f"(ids {base}..{self._num_classes - 1 + base})"
                )
        if LABEL_TEXT[key] not in values:
            return
        texts = [text.decode() for text in np.atleast_1d(values[LABEL_TEXT[key]])]
        if len(texts) != len(ids):
            raise ValueError(f"{len(ids)} values in {key}, {len(texts)} in {LABEL_TEXT[key]}")
        for label_id, text in zip(ids, texts):
            if label_id < len(self._vocabulary) and text != self._vocabulary[label_id]:
                raise ValueError(
                    f"{key} {label_id + base} is {self._vocabulary[label_id]!r} "
                    f"in the vocabulary, but {LABEL_TEXT[key]} says {text!r}"
                )
