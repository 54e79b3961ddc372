"""image_tfrecords.load(): every output kind read back through tf.data, from summary.json."""

import json
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft
from conftest import (
    BOX_ROWS,
    MULTI_LABEL_ROWS,
    copy_output,
    encode,
    photo_like,
    read_examples,
    rewrite_records,
    shard_files,
    shard_pattern,
)

import image_tfrecords
from image_tfrecords.core.records import naming


def by_sha256(elements):
    return {element["image/key/sha256"].numpy().decode(): element for element in elements}


def test_every_example_loads_with_every_key_and_its_decoded_image(sample_output):
    summary = json.loads((sample_output / "summary.json").read_text())
    vocabulary = summary["vocabulary"]["label"]
    for split, stats in summary["splits"].items():
        loaded = by_sha256(image_tfrecords.load(str(sample_output), split, batch_size=None))
        assert len(loaded) == stats["examples"]
        for example in read_examples(shard_pattern(sample_output, split)):
            keys = example.features.feature
            element = loaded[keys["image/key/sha256"].bytes_list.value[0].decode()]
            assert set(element) == set(summary["features"])
            pixels = tf.io.decode_image(keys["image/encoded"].bytes_list.value[0], channels=3)
            np.testing.assert_array_equal(element["image/encoded"].numpy(), pixels.numpy())
            assert element["image/encoded"].dtype == tf.uint8
            label = int(element["image/class/label"])
            assert vocabulary[label] == element["image/class/text"].numpy().decode()


def test_supervised_batches_have_the_shapes_keras_takes(sample_output):
    dataset = image_tfrecords.load(
        str(sample_output), "train", batch_size=8, image_size=(40, 50), as_supervised=True
    )
    batches = list(dataset)
    assert [len(labels) for _, labels in batches] == [8, 8, 8, 7]
    assert len(dataset) == 4  # known before a pass: Keras counts an epoch's batches
    images, labels = batches[0]
    assert images.shape == (8, 40, 50, 3) and images.dtype == tf.float32
    assert labels.shape == (8,) and labels.dtype == tf.int64
    assert 0 <= float(tf.reduce_min(images)) and float(tf.reduce_max(images)) <= 255
    ids = np.concatenate([labels.numpy() for _, labels in batches])
    assert np.bincount(ids).tolist() == [11, 10, 10]  # cat, flower, coffee in TRAIN


def test_unbatched_images_keep_their_size_and_batches_of_them_are_ragged(sample_output):
    batch = next(iter(image_tfrecords.load(str(sample_output), "test", batch_size=3)))
    assert isinstance(batch["image/encoded"], tf.RaggedTensor)
    for image, height, width in zip(
        batch["image/encoded"], batch["image/height"], batch["image/width"]
    ):
        assert image.to_tensor().shape == (int(height), int(width), 3)


def test_train_is_shuffled_anew_each_pass_other_splits_read_in_a_fixed_order(sample_output):
    def order(split):
        dataset = image_tfrecords.load(str(sample_output), split, batch_size=None)
        return [element["image/key/sha256"].numpy() for element in dataset]

    first, second = order("train"), order("TRAIN")
    assert first != second and sorted(first) == sorted(second)
    assert order("validation") == order("Validation") == order("val") == order("eval")


def test_a_split_is_named_in_any_case_and_an_unknown_one_is_refused(tfrecord_output, tmp_path):
    output = image_tfrecords.Output.read(str(tfrecord_output))
    assert output.shards("Test") == output.shards("test") and output.shards("DEV")
    with pytest.raises(ValueError, match="unknown split 'holdout': give one of train"):
        image_tfrecords.load(str(tfrecord_output), "holdout")
    copy = copy_output(tfrecord_output, tmp_path / "copy")
    summary = json.loads((copy / "summary.json").read_text())
    del summary["splits"]["test"]
    (copy / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(ValueError, match="split 'TEST': the output has only train, validation"):
        image_tfrecords.Output.read(str(copy)).shards("TEST")


def test_gzip_output_loads_the_same_examples(tfrecord_output, gzip_output):
    for split in ("train", "validation", "test"):
        plain = by_sha256(image_tfrecords.load(str(tfrecord_output), split, batch_size=None))
        gzip = by_sha256(image_tfrecords.load(str(gzip_output), split, batch_size=None))
        assert sorted(plain) == sorted(gzip)


def test_loads_through_tensorflow_filesystems_not_only_local_paths(sample_output):
    """ram:// stands in for gs://: both are reached through tf.io.gfile only."""
    # In name order: TensorFlow's ram:// cannot create a file once a longer name that
    # starts with its name (its .idx) is there (it reads back empty; gs:// has no such rule).
    folder = f"ram://{sample_output.parent.name}"
    for path in sorted(sample_output.rglob("*")):
        if path.is_file():
            target = f"{folder}/{path.relative_to(sample_output)}"
            tf.io.gfile.makedirs(target.rsplit("/", 1)[0])
            tf.io.gfile.copy(str(path), target, overwrite=True)
    batches = image_tfrecords.load(folder, "validation", image_size=16, as_supervised=True)
    assert sum(len(labels) for _, labels in batches) == 6


def test_multi_label_lists_and_multi_hot_supervised_labels(multi_label_output):
    vocabulary = image_tfrecords.Output.read(str(multi_label_output)).vocabulary
    for element in image_tfrecords.load(str(multi_label_output), "train", batch_size=None):
        name = element["image/filename"].numpy().decode()
        expected = MULTI_LABEL_ROWS[name][1]
        assert [vocabulary[i] for i in element["image/class/label"].numpy()] == expected
    batch = next(
        iter(
            image_tfrecords.load(
                str(multi_label_output), "validation", image_size=8, as_supervised=True
            )
        )
    )
    hot = {word: 1.0 for word in MULTI_LABEL_ROWS["d.jpg"][1]}
    assert batch[1].numpy().tolist() == [[hot.get(word, 0.0) for word in vocabulary]]


def test_detection_boxes_load_as_ragged_lists_and_there_is_no_supervised_label(boxes_output):
    batch = next(
        iter(
            image_tfrecords.load(
                str(boxes_output), "train", batch_size=3, shuffle=False, image_size=32
            )
        )
    )
    assert isinstance(batch["image/object/bbox/xmin"], tf.RaggedTensor)
    assert batch["image/encoded"].shape == (3, 32, 32, 3)
    for index, name in enumerate(batch["image/filename"].numpy()):
        boxes = BOX_ROWS[name.decode()][1]
        assert batch["image/object/class/text"][index].numpy().tolist() == [
            text.encode() for text, _ in boxes
        ]
        np.testing.assert_allclose(
            batch["image/object/bbox/ymax"][index].numpy(), [box[3] for _, box in boxes]
        )
    with pytest.raises(ValueError, match="as_supervised needs image/class/label"):
        image_tfrecords.load(str(boxes_output), as_supervised=True)


def test_keys_summary_json_adds_are_parsed_and_images_among_them_decoded(sample_output, tmp_path):
    """A second image and a float, as extra columns would add them: nothing names them."""
    output = copy_output(sample_output, tmp_path / "out")
    mask = encode(photo_like(20, 10, 0, "L"), "PNG")

    def add_keys(index, example):
        example.features.feature["mask/encoded"].bytes_list.value.append(mask)
        example.features.feature["extra/score"].float_list.value.append(index / 2)

    for shard in shard_files(output, "validation"):
        rewrite_records(shard, add_keys)
    summary = json.loads((output / "summary.json").read_text())
    summary["features"] |= {
        "mask/encoded": {"dtype": "bytes", "list": False},
        "extra/score": {"dtype": "float", "list": False},
    }
    (output / "summary.json").write_text(json.dumps(summary))
    for element in image_tfrecords.load(str(output), "validation", batch_size=None):
        assert element["mask/encoded"].shape == (10, 20, 3)
        assert element["extra/score"].dtype == tf.float32


def test_reading_imports_neither_beam_nor_tf_transform(sample_output):
    code = (
        f"import sys, image_tfrecords, image_tfrecords.verify, image_tfrecords.inspection\n"
        f"list(image_tfrecords.load({str(sample_output)!r}, 'test'))\n"
        f"image_tfrecords.verify.verify({str(sample_output)!r})\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in "
        f"('apache_beam', 'tensorflow_transform', 'tfx_bsl')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_reader_finds_the_files_where_the_writer_puts_them(sample_output):
    written = tft.TFTransformOutput(str(sample_output)).vocabulary_by_name(naming.LABEL_VOCABULARY)
    assert image_tfrecords.Output.read(str(sample_output)).vocabulary == [
        word.decode() for word in written
    ]
