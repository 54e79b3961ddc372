"""--vocabulary: a file of labels, or an earlier output's ids, read and checked up front."""

import pytest

from transforms.vocabulary_file import (PinnedVocabulary, VocabularyError,
                                        read_pinned_vocabulary, write_pinned_vocabulary)


def test_a_file_gives_ids_in_line_order_as_manifest_labels_are_read(tmp_path):
    # Windows line ends, a byte-order mark and spaces around a label, as editors leave them.
    (tmp_path / "synsets.txt").write_bytes("\ufeffn01440764 \r\nété\r\ncat\r\n".encode())
    assert read_pinned_vocabulary(str(tmp_path / "synsets.txt")) == PinnedVocabulary(
        str(tmp_path / "synsets.txt"), ("n01440764", "été", "cat"))


def test_an_earlier_output_gives_its_transform_fn_vocabulary(tmp_path):
    assets = tmp_path / "out" / "transform_fn" / "assets"
    assets.mkdir(parents=True)
    (assets / "label").write_text("dog\ncat\n")
    pinned = read_pinned_vocabulary(str(tmp_path / "out"))
    assert pinned == PinnedVocabulary(str(assets / "label"), ("dog", "cat"))


@pytest.mark.parametrize("text, problem", [
    ("cat\n\ndog\n", "line 2 is empty"),
    ("cat\n  \n", "line 2 is empty"),
    ("cat\ndog\n cat\n", "line 3: 'cat' repeats line 1"),
    ("", "no labels in it"),
])
def test_empty_and_repeated_lines_are_refused_naming_the_line(tmp_path, text, problem):
    (tmp_path / "v.txt").write_text(text)
    with pytest.raises(VocabularyError) as raised:
        read_pinned_vocabulary(str(tmp_path / "v.txt"))
    assert str(raised.value) == f"--vocabulary {tmp_path}/v.txt: {problem}"


@pytest.mark.parametrize(("text", "line"), [
    ("item {\n  id: 1\n  name: 'raccoon'\n}\n", 1),  # the OD API tutorials' label map
    ("# from the model zoo\nitem{\n  name: \"/m/01g317\"\n  id: 1\n  display_name: "
     "\"person\"\n}\n", 2),
])
def test_an_object_detection_label_map_is_refused_before_the_job_naming_its_line(
        tmp_path, text, line):
    """Read a line at a time it would pin "item {", "id: 1"...: every row unseen."""
    (tmp_path / "label_map.pbtxt").write_text(text)
    with pytest.raises(VocabularyError) as raised:
        read_pinned_vocabulary(str(tmp_path / "label_map.pbtxt"))
    assert str(raised.value).startswith(
        f"--vocabulary {tmp_path}/label_map.pbtxt: line {line} starts an Object Detection "
        "API label map entry")
    assert "give the names one a line, in id order" in str(raised.value)


def test_a_missing_vocabulary_or_one_not_in_utf8_is_refused(tmp_path):
    with pytest.raises(VocabularyError, match="neither a file of labels nor an image-tfrecords "
                                              "output"):
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
