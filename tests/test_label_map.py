"""label_map.pbtxt parses as the Object Detection API's StringIntLabelMap, any label text."""

from conftest import parse_label_map

from image_tfrecords.core.records.label_map import UNSEEN_LABEL_NAME, label_map_text


def test_ids_start_at_one_in_vocabulary_order():
    assert parse_label_map(label_map_text(["cat", "dog"], oov_bucket=False)) == {1: "cat", 2: "dog"}


def test_awkward_label_text_survives_the_text_format():
    names = ['say "hi"', "back\\slash", "two\nlines", "tab\tand\x01", "chat noir été", "猫"]
    assert parse_label_map(label_map_text(names, oov_bucket=False)) == dict(
        enumerate(names, start=1)
    )


def test_the_oov_bucket_gets_the_id_after_the_vocabulary():
    assert parse_label_map(label_map_text(["cat"], oov_bucket=True)) == {
        1: "cat",
        2: UNSEEN_LABEL_NAME,
    }
