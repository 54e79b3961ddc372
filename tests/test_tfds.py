"""TensorFlow Datasets reads an output as written: tfds.builder_from_directory(OUTPUT),
through `as_dataset` (tf.data) for TFRecord, `as_data_source` (random access) for
ArrayRecord, which TFDS reads no other way."""

import io
import json

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds
from conftest import (
    BOX_ROWS,
    MULTI_LABEL_ROWS,
    convert,
    copy_output,
    encode,
    photo_like,
    read_examples,
    rewrite_records,
    shard_files,
    shard_pattern,
)
from PIL import Image

from image_tfrecords.core.records.summary import FeatureInfo, RunOptions, Summary
from image_tfrecords.transforms.tfds_metadata import label_names, tfds_metadata

TFDS_FILES = {"dataset_info.json", "features.json", "image.class.label.labels.txt"}


def elements(builder, split):
    """The decoded examples of `split`, as TFDS reads the output's file format."""
    if builder.info.file_format == tfds.core.FileFormat.ARRAY_RECORD:
        return list(builder.as_data_source(split=split))
    return list(tfds.as_numpy(builder.as_dataset(split=split)))


def decoded(builder, encoded: bytes) -> np.ndarray | None:
    """The RGB pixels TFDS decodes an image to: TensorFlow's decoder in tf.data, Pillow in
    a data source (without OpenCV installed). None where a data source gives no RGB: it
    returns Pillow's array as stored, a palette PNG's indices or an RGBA PNG's 4 channels
    (README, "TensorFlow Datasets")."""
    if builder.info.file_format == tfds.core.FileFormat.ARRAY_RECORD:
        with Image.open(io.BytesIO(encoded)) as image:
            return np.asarray(image.convert("RGB")) if image.mode in ("RGB", "L") else None
    return tf.io.decode_image(encoded, channels=3).numpy()


def test_split_sizes_shard_lengths_and_label_names_are_the_summary_s(sample_output):
    summary = json.loads((sample_output / "summary.json").read_text())
    builder = tfds.builder_from_directory(str(sample_output))
    assert builder.info.features["image/class/label"].names == summary["vocabulary"]["label"]
    for split, stats in summary["splits"].items():
        info = builder.info.splits[split]
        assert info.num_examples == stats["examples"]
        assert info.shard_lengths == [shard["records"] for shard in stats["shards"]]
        assert sorted(info.filenames) == [
            shard["file"] for shard in stats["shards"]
        ]  # our files, no copies


def test_every_example_decodes_to_rgb_pixels_and_its_label(sample_output):
    builder = tfds.builder_from_directory(str(sample_output))
    names = builder.info.features["image/class/label"]
    stored = {}
    for example in read_examples(shard_pattern(sample_output)):
        keys = example.features.feature
        stored[keys["image/key/sha256"].bytes_list.value[0]] = keys
    for split in ("train", "validation", "test"):
        for element in elements(builder, split):
            keys = stored.pop(element["image/key/sha256"])
            pixels = decoded(builder, keys["image/encoded"].bytes_list.value[0])
            if pixels is not None:
                np.testing.assert_array_equal(element["image/encoded"], pixels)
            assert (
                names.int2str(element["image/class/label"]) == element["image/class/text"].decode()
            )
    assert not stored  # every record, once


def test_as_supervised_gives_image_label_pairs(tfrecord_output):
    builder = tfds.builder_from_directory(str(tfrecord_output))
    assert builder.info.supervised_keys == ("image/encoded", "image/class/label")
    pairs = list(builder.as_dataset(split="validation", as_supervised=True))
    assert len(pairs) == 6
    image, label = pairs[0]
    assert image.dtype == tf.uint8 and image.shape[-1] == 3 and label.dtype == tf.int64


def test_multi_label_ids_are_a_sequence_of_named_classes(multi_label_output):
    builder = tfds.builder_from_directory(str(multi_label_output))
    names = builder.info.features["image/class/label"].feature
    for element in tfds.as_numpy(builder.as_dataset(split="train")):
        expected = MULTI_LABEL_ROWS[element["image/filename"].decode()][1]
        assert [names.int2str(i) for i in element["image/class/label"]] == expected


def test_detection_objects_keep_their_1_based_ids_named_after_a_background(boxes_output):
    builder = tfds.builder_from_directory(str(boxes_output))
    names = builder.info.features["image/object/class/label"].feature
    assert names.names[0] == "[background]" and sorted(names.names[1:]) == ["cat", "dog"]
    for element in tfds.as_numpy(builder.as_dataset(split="train")):
        boxes = BOX_ROWS[element["image/filename"].decode()][1]
        assert [names.int2str(i) for i in element["image/object/class/label"]] == [
            text for text, _ in boxes
        ]
        np.testing.assert_allclose(
            element["image/object/bbox/xmin"], np.float32([box[0] for _, box in boxes])
        )
    assert builder.info.supervised_keys is None


def test_extra_keys_and_a_second_image_become_features(sample_output, tmp_path):
    output = copy_output(sample_output, tmp_path / "out")
    mask = encode(photo_like(20, 10, 0, "L"), "PNG")

    def add_keys(_, example):
        example.features.feature["mask/encoded"].bytes_list.value.append(mask)
        example.features.feature["extra/tags"].bytes_list.value.extend([b"a", b"b"])

    for shard in shard_files(output, "test"):
        rewrite_records(shard, add_keys)
    summary = Summary.from_json((output / "summary.json").read_text())
    summary = summary.model_copy(
        update={
            "features": summary.features
            | {
                "mask/encoded": FeatureInfo(dtype="bytes", list=False),
                "extra/tags": FeatureInfo(dtype="bytes", list=True),
            }
        }
    )
    for name, text in tfds_metadata(summary).items():
        (output / name).write_text(text)
    for element in elements(tfds.builder_from_directory(str(output)), "test"):
        assert element["mask/encoded"].shape == (10, 20, 3)
        assert list(element["extra/tags"]) == [b"a", b"b"]


def test_gzip_outputs_get_no_tfds_files_and_lose_stale_ones(tfrecord_output, tmp_path):
    """TFDS reads uncompressed tfrecord files only."""
    output = copy_output(tfrecord_output, tmp_path / "out")
    assert TFDS_FILES <= {path.name for path in output.iterdir()}
    summary = Summary.from_json((output / "summary.json").read_text())
    convert(
        output,
        "--manifest",
        *summary.manifests,
        "--max_error_fraction",
        "0.25",
        "--compression",
        "gzip",
        "--overwrite",
    )
    assert not TFDS_FILES & {path.name for path in output.iterdir()}
    assert (
        tfds_metadata(
            summary.model_copy(
                update={"options": summary.options.model_copy(update={"compression": "gzip"})}
            )
        )
        == {}
    )


def test_the_oov_id_is_named_after_the_vocabulary():
    summary = Summary(
        options=RunOptions(unseen_label="oov"),
        rows_read=0,
        examples_written=0,
        rows_in_examples=0,
        rows_dead_lettered=0,
        accounted=True,
        error_fraction=0.0,
        splits={},
        vocabulary={"label": ["b", "a"]},
    )
    assert label_names(summary) == ["b", "a", "[unseen label]"]
