"""--vocabulary: a file of labels, or an earlier output's ids, read and checked up front."""

from pathlib import Path

import pytest

from image_tfrecords.core.records.label_map import is_gap, label_map_text
from image_tfrecords.transforms.vocabulary_file import (
    PinnedVocabulary,
    VocabularyError,
    read_pinned_vocabulary,
    write_pinned_vocabulary,
)


def test_a_file_gives_ids_in_line_order_as_manifest_labels_are_read(tmp_path):
    # Windows line ends, a byte-order mark and spaces around a label, as editors leave them.
    (tmp_path / "synsets.txt").write_bytes("\ufeffn01440764 \r\nété\r\ncat\r\n".encode())
    assert read_pinned_vocabulary(str(tmp_path / "synsets.txt")) == PinnedVocabulary(
        str(tmp_path / "synsets.txt"), ("n01440764", "été", "cat")
    )


def test_an_earlier_output_gives_its_transform_fn_vocabulary(tmp_path):
    assets = tmp_path / "out" / "transform_fn" / "assets"
    assets.mkdir(parents=True)
    (assets / "label").write_text("dog\ncat\n")
    pinned = read_pinned_vocabulary(str(tmp_path / "out"))
    assert pinned == PinnedVocabulary(str(assets / "label"), ("dog", "cat"))


@pytest.mark.parametrize(
    "text, problem",
    [
        ("cat\n\ndog\n", "line 2 is empty"),
        ("cat\n  \n", "line 2 is empty"),
        ("cat\ndog\n cat\n", "line 3: 'cat' repeats line 1"),
        ("", "no labels in it"),
    ],
)
def test_empty_and_repeated_lines_are_refused_naming_the_line(tmp_path, text, problem):
    (tmp_path / "v.txt").write_text(text)
    with pytest.raises(VocabularyError) as raised:
        read_pinned_vocabulary(str(tmp_path / "v.txt"))
    assert str(raised.value) == f"--vocabulary {tmp_path}/v.txt: {problem}"


LABEL_MAPS = Path(__file__).parent / "data" / "public" / "label_maps"


def pinned(name, labels=()):
    return read_pinned_vocabulary(str(LABEL_MAPS / name), lambda: labels).labels


def test_a_label_map_gives_each_item_its_own_id():
    """The pets map (single quotes, blank lines): item id N is vocabulary entry N - 1, so
    detection's class/label is the map's id; no trailing newline (a fork's KITTI map)
    and the `item: {` form with nested keypoints (the API's face/person map) read too."""
    pets = pinned("pet_label_map.pbtxt")
    assert (len(pets), pets[0], pets[36]) == (37, "Abyssinian", "yorkshire_terrier")
    assert pinned("ahmorsi_kitti_label_map.pbtxt") == (
        "car",
        "pedestrian",
        "truck",
        "cyclist",
        "tram",
    )
    assert pinned("face_person_with_keypoints_label_map.pbtxt") == ("face", "Person")


def test_the_coco_map_matches_display_names_and_keeps_its_gaps():
    """Its names are Freebase ids (and several are "NA"): the data's labels, COCO's
    category names, are its display names. Ids 12, 26... name no item: their entries
    stand empty, matched by no label and left out of the published label map."""
    for labels in (("person", "stop sign"), ()):
        coco = pinned("mscoco_label_map.pbtxt", labels)
        assert (len(coco), coco[0], coco[12], coco[89]) == (90, "person", "stop sign", "toothbrush")
        assert is_gap(coco[11]) and sum(map(is_gap, coco)) == 10
    text = label_map_text(coco, oov_bucket=False)
    assert "id: 12\n" not in text and 'id: 13\n  name: "stop sign"' in text
    assert text.count("item {") == 80


def test_the_open_images_map_follows_what_the_data_calls_its_classes():
    assert pinned("oid_v4_label_map.pbtxt", {"/m/011k07", "/m/0138tl"})[0] == "/m/011k07"
    assert pinned("oid_v4_label_map.pbtxt", {"Tortoise", "Toy"})[0] == "Tortoise"
    assert pinned("oid_v4_label_map.pbtxt")[0] == "/m/011k07"  # nothing to go by


@pytest.mark.parametrize(
    "text, problem",
    [
        ("item {\n  id: 1\n  name: 'a'\n", 'not a label map: line 3, column 9: Expected "}"'),
        ("item {\n  id: 1\n  nmae: 'a'\n}\n", "the item with id 1 has no name"),
        (
            "item { id: 0 name: 'background' }\nitem { id: 1 name: 'a' }\n",
            "item 1 ('background') has id 0: ids start at 1",
        ),
        (
            "item { id: 1 name: 'a' }\nitem { id: 2 name: 'a' }\n",
            "the items with ids 1 and 2 are both name 'a'",
        ),
        (
            "item { id: 1 name: 'cat' display_name: 'dog' }\n"
            "item { id: 2 name: 'dog' display_name: 'cat' }\n",
            "the label 'cat' is the name of id 1 and the display_name of id 2",
        ),
    ],
)
def test_a_label_map_that_cannot_pin_ids_is_refused_saying_why(tmp_path, text, problem):
    (tmp_path / "label_map.pbtxt").write_text(text)
    with pytest.raises(VocabularyError) as raised:
        read_pinned_vocabulary(str(tmp_path / "label_map.pbtxt"), lambda: {"cat"})
    assert str(raised.value).startswith(f"--vocabulary {tmp_path}/label_map.pbtxt: {problem}")


def test_a_map_giving_several_names_one_id_is_refused_naming_them():
    """A fork's KITTI map merges car, van and truck into id 1."""
    with pytest.raises(
        VocabularyError,
        match=r"items 1 \('car'\) and 2 \('van'\) both have "
        "id 1: a vocabulary gives each id one label",
    ):
        pinned("MalteOeljeklaus_kitti_label_map.pbtxt")


def test_a_missing_vocabulary_or_one_not_in_utf8_is_refused(tmp_path):
    with pytest.raises(
        VocabularyError, match="neither a file of labels nor an image-tfrecords output"
    ):
        read_pinned_vocabulary(str(tmp_path / "none"))
    (tmp_path / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    with pytest.raises(VocabularyError, match="not UTF-8"):
        read_pinned_vocabulary(str(tmp_path / "latin1.txt"))


def test_written_for_tf_transform_under_the_vocabulary_name_and_read_back_the_same(tmp_path):
    pinned = PinnedVocabulary("given.txt", ("dog", "été", "a cat"))
    path = write_pinned_vocabulary(pinned, str(tmp_path / "pinned"))
    assert path == str(tmp_path / "pinned" / "label")
    assert (tmp_path / "pinned" / "label").read_text() == "dog\nété\na cat\n"
    assert read_pinned_vocabulary(path).labels == pinned.labels
