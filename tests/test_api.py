"""The Python API: convert() from a CSV, a folder or a DataFrame, and df.tfrecords."""

import gc
import json
import logging
import os

import pandas as pd
import pytest
from conftest import encode, feature, photo_like, read_examples

import image_tfrecords
from image_tfrecords.core.inputs.rows import assign_split
from image_tfrecords.pipeline import run
from image_tfrecords.transforms.shards import shard_of


@pytest.fixture()
def photos(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "img").mkdir()
    names = [f"img/{i}.jpg" for i in range(6)]
    for i, name in enumerate(names):
        (tmp_path / name).write_bytes(encode(photo_like(16, 12, i), "JPEG"))
    return tmp_path, names


def test_dataframe_with_relative_paths_and_some_splits_missing(photos):
    root, names = photos
    frame = pd.DataFrame(
        {
            "image_uri": names,
            "label": ["cat", "dog"] * 3,
            "split": ["train", "train", "TRAIN", None, "test", "UNASSIGNED"],
        }
    )
    result = frame.tfrecords.to_tfrecords(str(root / "out"), unseen_label="oov")
    assert result.ok and result.rows_read == 6 and result.examples_written == 6
    splits = {}
    for split, files in result.files.items():
        for example in read_examples(files[0]) if files else []:
            splits[feature(example, "image/source_id").decode()] = split
    expected = {str(root / n): s for n, s in zip(names[:3] + names[4:5], ["train"] * 3 + ["test"])}
    for name in (names[3], names[5]):  # hashed as given, not as resolved
        expected[str(root / name)] = assign_split(name, (0.8, 0.1, 0.1))
    assert splits == expected
    assert not [n for n in os.listdir(root) if n.startswith("manifest-")]


def test_convert_from_a_list_of_csvs_and_from_a_folder(photos):
    root, names = photos
    (root / "m.csv").write_text("".join(f"train,{n},cat\n" for n in names[:4]))
    (root / "n.csv").write_text("".join(f"train,{n},cat\n" for n in names[4:]))
    result = image_tfrecords.convert(
        [str(root / "m.csv"), root / "n.csv"], str(root / "a"), num_shards=2
    )
    assert result.examples == {"train": 6, "validation": 0, "test": 0}
    assert result.summary.manifests == (str(root / "m.csv"), str(root / "n.csv"))
    # Shards are chosen by a hash of the resolved URI: both get images unless the hash
    # happens to put all six in one (the temp folder's name decides).
    used = {shard_of(str(root / name), 2) for name in names}
    assert len(result.files["train"]) == len(used)
    assert result.error_files == [] and not list(root.glob("a/errors-*"))  # nothing rejected
    assert result.report == str(root / "a" / "report.html") and os.path.exists(result.report)
    assert json.loads((root / "a" / "summary.json").read_text())["options"]["num_shards"] == 2
    # The run froze what lives as long as it does; an API caller gets the collector back.
    assert gc.isenabled() and gc.get_freeze_count() == 0

    (root / "folder" / "train" / "cat").mkdir(parents=True)
    for name in names:
        os.rename(root / name, root / "folder" / "train" / "cat" / os.path.basename(name))
    result = image_tfrecords.convert(str(root / "folder"), str(root / "b"))
    assert result.examples["train"] == 6


def test_a_failed_run_is_reported_not_raised_and_bad_options_raise(photos, capfd, caplog):
    root, names = photos
    (root / "m.csv").write_text(f"train,{names[0]},cat\ntrain,img/missing.jpg,cat\n")
    result = image_tfrecords.convert(str(root / "m.csv"), str(root / "out"))
    assert not result.ok and "more than --max_error_fraction" in result.problem
    # Returned quietly: the failure is the result's, not a crash logged by Beam.
    printed = capfd.readouterr()
    assert "Traceback" not in printed.err + printed.out and "RunFailed" not in printed.err
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert result.rows_dead_lettered == 1
    # Nothing published: no summary.json, no shard; the dead letters stay in the temp dir.
    assert result.files == {} and not (root / "out" / "summary.json").exists()
    (letters,) = result.error_files
    assert letters.startswith(f"{root}/out/.tmp-") and "img/missing.jpg" in open(letters).read()
    # Its report is staged beside them, to look at what went wrong.
    assert result.report is None
    assert "img/missing.jpg" in open(os.path.join(os.path.dirname(letters), "report.html")).read()
    with pytest.raises(ValueError, match="--jpeg_quality"):
        image_tfrecords.convert(str(root / "m.csv"), str(root / "other"), jpeg_quality=0)
    # A DataFrame's columns are refused in the CSV reader's words, naming the DataFrame.
    with pytest.raises(ValueError, match="^the DataFrame: the header 'file' names no label"):
        image_tfrecords.convert(pd.DataFrame({"file": names}), str(root / "other"))
    for unusable in (
        0,
        None,
        "",
        [],
        [0],
        (str(root / "m.csv"), None),
        b"m.csv",
        [str(root / "m.csv"), str(root / "img")],
    ):
        with pytest.raises(ValueError, match=r"^source .*: (give a manifest path|a list holds)"):
            image_tfrecords.convert(unusable, str(root / "other"))
    with pytest.raises(ValueError, match="no_wait_until_finish"):
        image_tfrecords.convert(str(root / "m.csv"), str(root / "other"), no_wait_until_finish=True)
    assert not (root / "other").exists()


def test_dataframe_without_a_split_column(photos):
    root, names = photos
    frame = pd.DataFrame({"path": names, "label": ["cat"] * 6})
    result = image_tfrecords.convert(
        frame, str(root / "out"), split_fractions="0.5,0.5,0", unseen_label="oov"
    )
    want = {"train": 0, "validation": 0, "test": 0}
    for name in names:
        want[assign_split(name, (0.5, 0.5, 0.0))] += 1
    assert result.examples == want and want["test"] == 0


def test_label_order_through_the_api_and_the_dataframe_accessor(photos):
    root, names = photos
    labels = ["zebra"] * 5 + ["ant"]
    frame = pd.DataFrame({"image_uri": names, "label": labels, "split": ["train"] * 6})
    by_default = frame.tfrecords.to_tfrecords(str(root / "sorted"))
    assert by_default.summary.labels == ("ant", "zebra")
    (root / "m.csv").write_text("".join(f"train,{n},{label}\n" for n, label in zip(names, labels)))
    by_frequency = image_tfrecords.convert(
        str(root / "m.csv"), str(root / "frequency"), label_order="frequency"
    )
    assert by_frequency.summary.labels == ("zebra", "ant")
    assert by_frequency.summary.options.label_order == "frequency"


def test_a_dataframe_whose_relative_paths_resolve_nowhere_is_refused_before_the_job(photos, capsys):
    """Not one image of the first rows in the current directory (or image_dir): refused
    up front naming the rows by their paths and the folder, not a job that dead-letters
    every row; as a CSV's rows are with a wrong --image_dir. A few missing images are
    ordinary dead letters."""
    root, names = photos
    bare = [os.path.basename(name) for name in names]  # the images are in img/
    frame = pd.DataFrame({"image_uri": bare, "label": ["cat"] * 6})
    with pytest.raises(ValueError) as refused:
        frame.tfrecords.to_tfrecords(str(root / "out"))
    assert str(refused.value) == (
        f"the DataFrame: not one image of its first 6 rows is in the current directory "
        f"{root}, which relative paths are read from: '0.jpg', '1.jpg', '2.jpg', ...; give "
        "absolute paths, or image_dir= the folder they are in"
    )
    with pytest.raises(ValueError, match=f"^the DataFrame: .* is in image_dir {root}/out, "):
        frame.tfrecords.to_tfrecords(str(root / "out"), image_dir="out")
    assert not (root / "out").exists()  # nothing started

    (root / "m.csv").write_text("".join(f"train,{name},cat\n" for name in bare))
    code = run.main(
        [
            "--manifest",
            str(root / "m.csv"),
            "--image_dir",
            str(root),
            "--output_dir",
            str(root / "out"),
        ]
    )
    assert code == run.EXIT_USAGE and capsys.readouterr().err == (
        f"error: not one image of the first 6 rows is in --image_dir {root}: 0.jpg "
        f"({root}/m.csv line 1), 1.jpg ({root}/m.csv line 2), 2.jpg ({root}/m.csv line 3), "
        "...; give absolute paths, or the folder the names are relative to as --image_dir\n"
    )

    some_missing = pd.DataFrame({"image_uri": [names[0], "img/missing.jpg"], "label": ["cat"] * 2})
    result = some_missing.tfrecords.to_tfrecords(str(root / "out"), max_error_fraction=0.5)
    assert result.ok and result.rows_dead_lettered == 1


def test_keyword_values_that_start_with_a_dash_reach_their_options_as_given():
    """The API's keywords go through the command line's parser; a value such as a label
    separator '-;' or a file named '-old.csv' is the option's value, not a flag."""
    from image_tfrecords.conversion import _flags
    from image_tfrecords.pipeline.options import ConvertOptions, unknown_option_problem

    keywords = {"manifest": ["-old.csv", "new.csv"], "label_separator": "-;", "quiet": True}
    argv = list(_flags({**keywords, "resume": False, "num_shards": 3}))
    assert unknown_option_problem(argv) is None
    options = ConvertOptions(argv)
    assert (options.manifest, options.label_separator, options.quiet) == (
        ["-old.csv", "new.csv"],
        "-;",
        True,
    )
    assert (options.resume, options.num_shards) == (False, 3)
