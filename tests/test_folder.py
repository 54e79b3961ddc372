"""Image folders as a source: layouts, splits, files that are not images or misplaced."""

import pytest

from transforms.folder import NOT_IN_LABEL_FOLDER, check_folder, folder_rows
from transforms.manifest import ManifestError, ManifestRow, assign_split


def make_files(root, *relative_paths):
    for relative in relative_paths:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")


def test_split_and_label_folders_and_label_only_folders(tmp_path):
    make_files(tmp_path, "TRAIN/cat/a.jpg", "validation/dog/b.PNG", "fish/c.jpeg",
               "fish/.hidden.jpg", "fish/notes.txt", ".DS_Store", "loose.jpg",
               "cat/deeper/d.jpg")
    rows = sorted(folder_rows(str(tmp_path) + "/", (0.8, 0.1, 0.1)), key=lambda r: r.raw)
    good = [r for r in rows if isinstance(r, ManifestRow)]
    assert [(r.raw, r.split, r.labels, r.uri) for r in good] == [
        ("TRAIN/cat/a.jpg", "train", ("cat",), str(tmp_path / "TRAIN/cat/a.jpg")),
        ("fish/c.jpeg", assign_split("fish/c.jpeg", (0.8, 0.1, 0.1)), ("fish",),
         str(tmp_path / "fish/c.jpeg")),
        ("validation/dog/b.PNG", "validation", ("dog",), str(tmp_path / "validation/dog/b.PNG")),
    ]
    misplaced = [(r.raw, r.reason) for r in rows if not isinstance(r, ManifestRow)]
    assert misplaced == [("cat/deeper/d.jpg", NOT_IN_LABEL_FOLDER),
                         ("loose.jpg", NOT_IN_LABEL_FOLDER)]


def test_a_missing_or_empty_folder_is_a_clear_error(tmp_path):
    with pytest.raises(ManifestError, match="image folder not found or empty"):
        check_folder(str(tmp_path / "nope"))
    make_files(tmp_path, "cat/a.jpg")
    check_folder(str(tmp_path))
