"""A split column under a name of its own (issue 41): --split_column on the command line,
the Python API and a DataFrame; without it, a column holding only split names is used
and named in the console, or the run is refused naming the columns; never a silent
re-split by hash."""

import pandas as pd
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from conftest import encode, feature, photo_like, read_examples, shard_pattern

import image_tfrecords
from image_tfrecords.core.inputs.automl_csv import split_name_columns
from image_tfrecords.core.inputs.rows import DiscardedRow, ManifestError, RowRules, assign_split
from image_tfrecords.core.inputs.sources import find_manifests, read_manifest
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.pipeline import run
from image_tfrecords.pipeline.options import ConvertOptions
from image_tfrecords.pipeline.read_choices import settle_read_choices

FOLDS = ("train", "val", "test", "TRAIN")
FOLD_SPLITS = {"train": "train", "val": "validation", "test": "test", "TRAIN": "train"}


def pets(folder, rows: int = 32) -> dict[str, str]:
    """pets.csv `picture,breed,fold` over `rows` real images in `folder`: the issue's
    example. Returns each image's path -> the split its fold names."""
    lines, want = ["picture,breed,fold"], {}
    for index in range(rows):
        name = f"p{index}.jpg"
        (folder / name).write_bytes(encode(photo_like(8, 8, index), "JPEG"))
        fold = FOLDS[index % len(FOLDS)]
        lines.append(f"{name},{('cat', 'dog')[index % 2]},{fold}")
        want[str(folder / name)] = FOLD_SPLITS[fold]
    (folder / "pets.csv").write_text("\n".join(lines) + "\n")
    return want


def written_splits(output) -> dict[str, str]:
    """Each example's image/source_id -> the split whose shards hold it."""
    return {
        feature(example, "image/source_id").decode(): split
        for split in ("train", "validation", "test")
        for example in read_examples(shard_pattern(output, split))
    }


def test_the_issues_fold_column_is_used_and_named_every_row_in_its_fold(tmp_path, capsys):
    """Today 14 of these 32 rows landed in their fold, by hash, with exit 0. The column is
    chosen before the job (settled), which writes each row to its split: checked on the
    shards by test_split_column_in_the_api_on_a_csv_and_on_a_dataframe."""
    want = pets(tmp_path)
    convert = settled(
        tmp_path,
        "--manifest",
        str(tmp_path / "pets.csv"),
        "--uri_column",
        "picture",
        "--label_column",
        "breed",
        "--unseen_label",
        "oov",
    )
    assert "splits from the column 'fold' (train, val, test)" in capsys.readouterr().out
    rows = read_manifest(str(tmp_path / "pets.csv"), convert.row_rules())
    assert {row.uri: row.split for row in rows} == want
    assert convert.split_column == "fold"  # summary.json's options.split_column


def test_split_column_in_the_api_on_a_csv_and_on_a_dataframe(tmp_path, monkeypatch):
    """The DataFrame takes the CSV's column options (uri_column, label_column,
    split_column), its relative paths relative to the current directory."""
    want = pets(tmp_path, rows=8)
    (tmp_path / "pets.csv").write_text((tmp_path / "pets.csv").read_text().replace("fold", "round"))
    result = image_tfrecords.convert(
        str(tmp_path / "pets.csv"),
        str(tmp_path / "csv"),
        uri_column="picture",
        label_column="breed",
        split_column="round",
        unseen_label="oov",
    )
    assert result.ok and written_splits(tmp_path / "csv") == want
    assert result.summary.options.split_column == "round"

    monkeypatch.chdir(tmp_path)
    frame = pd.read_csv(tmp_path / "pets.csv").rename(columns={"round": "stage"})
    result = frame.tfrecords.to_tfrecords(
        str(tmp_path / "frame"),
        uri_column="picture",
        label_column="breed",
        split_column="stage",
        unseen_label="oov",
    )
    assert result.ok and written_splits(tmp_path / "frame") == want


def test_a_dataframe_takes_the_csv_readers_column_names(tmp_path, monkeypatch):
    """`filename` and `class` are names the CSV reader knows and the accessor did not;
    a DataFrame with no mappable column is refused in the reader's words, naming the
    DataFrame, not the file it is written to."""
    monkeypatch.chdir(tmp_path)
    for index in range(4):
        (tmp_path / f"{index}.png").write_bytes(encode(photo_like(8, 8, index), "PNG"))
    frame = pd.DataFrame(
        {
            "filename": [f"{index}.png" for index in range(4)],
            "class": ["a", "b", "a", "b"],
            "set": ["train"] * 4,
        }
    )
    result = image_tfrecords.convert(frame, str(tmp_path / "out"))
    assert result.ok and result.examples["train"] == 4
    assert sorted(result.summary.vocabulary["label"]) == ["a", "b"]
    with pytest.raises(
        ValueError,
        match=r"^the DataFrame: the header 'picture,breed' names "
        r"no uri column .*--uri_column NAME",
    ):
        image_tfrecords.convert(
            pd.DataFrame({"picture": ["0.png"], "breed": ["a"]}), str(tmp_path / "other")
        )


def test_split_column_reads_splits_as_the_split_column_does(tmp_path):
    """Names normalised (any case, val...), empty and UNASSIGNED split by hash, DISCARD
    left out, anything else an invalid_split dead letter naming the row and value."""
    (tmp_path / "m.csv").write_text(
        "picture,breed,fold,split\n"
        "a.jpg,cat,VAL,test\nb.jpg,cat,,test\n"
        "c.jpg,cat,unassigned,test\nd.jpg,cat,DISCARD,test\n"
        "e.jpg,cat,fold-3,test\n"
    )
    rules = RowRules(uri_column="picture", label_column="breed", split_column="Fold")
    a, b, c, d, e = read_manifest(str(tmp_path / "m.csv"), rules)
    assert a.split == "validation"  # the fold, not the `split` column it overrides
    assert (b.split, c.split) == (
        assign_split("b.jpg", rules.split_fractions),
        assign_split("c.jpg", rules.split_fractions),
    )
    assert isinstance(d, DiscardedRow)
    assert (e.reason, e.line, e.split) == (reasons.INVALID_SPLIT, 6, "fold-3")
    assert "'fold-3'" in e.message
    with pytest.raises(
        ManifestError, match="--split_column 'round' is not a column of the first row"
    ):
        list(
            read_manifest(
                str(tmp_path / "m.csv"), RowRules(split_column="round", uri_column="picture")
            )
        )


def test_split_column_none_splits_every_row_by_hash(tmp_path):
    """Header or headerless (AutoML's first column), the written split is left unread."""
    (tmp_path / "h.csv").write_text("image,label,split\na.jpg,cat,test\nb.jpg,cat,DISCARD\n")
    (tmp_path / "a.csv").write_text("test,a.jpg,cat\n")
    rules = RowRules(split_column="none")
    rows = [
        *read_manifest(str(tmp_path / "h.csv"), rules),
        *read_manifest(str(tmp_path / "a.csv"), rules),
    ]
    assert [row.split for row in rows] == [
        assign_split(name, rules.split_fractions) for name in ("a.jpg", "b.jpg", "a.jpg")
    ]
    # Without it, the headerless AutoML manifest keeps its split column.
    (row,) = read_manifest(str(tmp_path / "a.csv"))
    assert row.split == "test"


def settled(tmp_path, *args) -> ConvertOptions:
    convert = PipelineOptions([*args, "--output_dir", str(tmp_path / "out")]).view_as(
        ConvertOptions
    )
    settle_read_choices(convert, find_manifests(convert.manifest, convert.input_format))
    return convert


def test_several_split_name_columns_are_refused_naming_them(tmp_path, capsys):
    (tmp_path / "m.csv").write_text(
        "image,label,fold,stage\na.jpg,cat,train,val\nb.jpg,dog,test,train\n"
    )
    code = run.main(["--manifest", str(tmp_path / "m.csv"), "--output_dir", str(tmp_path / "out")])
    error = capsys.readouterr().err
    assert code == run.EXIT_USAGE and error.count("\n") == 1
    assert "the columns 'fold', 'stage' hold only split names" in error
    assert "--split_column NAME" in error and "--split_column none" in error
    assert not (tmp_path / "out").exists()
    # Either option settles it, and nothing is said.
    assert (
        settled(
            tmp_path, "--manifest", str(tmp_path / "m.csv"), "--split_column", "stage"
        ).split_column
        == "stage"
    )
    assert (
        settled(
            tmp_path, "--manifest", str(tmp_path / "m.csv"), "--split_column", "none"
        ).split_column
        == "none"
    )
    assert capsys.readouterr().out == ""


def test_manifests_whose_split_columns_disagree_are_refused_naming_each(tmp_path):
    (tmp_path / "m.csv").write_text("image,label,fold\na.jpg,cat,train\n")
    (tmp_path / "n.csv").write_text("train,b.jpg,dog\n")
    with pytest.raises(ManifestError) as refused:
        settled(
            tmp_path, "--manifest", str(tmp_path / "m.csv"), "--manifest", str(tmp_path / "n.csv")
        )
    assert f"{tmp_path / 'm.csv'}: the column 'fold' holds only split names (train)" in str(
        refused.value
    )
    assert f"{tmp_path / 'n.csv'}: no column of another name" in str(refused.value)


@pytest.mark.parametrize(
    "text, found",
    [
        ("test,a.jpg,cat\ntrain,b.jpg,dog\n", ()),  # headerless AutoML: column 1 is the split
        ("image,label,split,fold\na.jpg,cat,train,test\n", ()),  # a known split column
        ("image,label,fold\na.jpg,cat,3\nb.jpg,cat,train\n", ()),  # k-fold numbers
        ("image,label,fold\na.jpg,cat,\nb.jpg,cat,UNASSIGNED\n", ()),  # no split name at all
        # The label column is read as the label, whatever it holds; `note` holds a split.
        ("image,label,note\na.jpg,train,test\nb.jpg,val,\n", (("note", ("test",)),)),
    ],
)
def test_a_split_column_is_found_only_under_a_name_the_reader_does_not_map(tmp_path, text, found):
    (tmp_path / "m.csv").write_text(text)
    assert split_name_columns(str(tmp_path / "m.csv"), RowRules(), rows=200) == found


def test_split_column_is_for_csv_manifests(tmp_path, capsys):
    (tmp_path / "i.jsonl").write_text("{}\n")
    (tmp_path / "photos" / "cat").mkdir(parents=True)
    for args, words in (
        (
            ["--manifest", str(tmp_path / "i.jsonl")],
            "--split_column name columns of CSV manifests only",
        ),
        (
            ["--image_folder", str(tmp_path / "photos")],
            "--split_column name columns of a --manifest, not of --image_folder",
        ),
    ):
        code = run.main([*args, "--split_column", "fold", "--output_dir", str(tmp_path / "o")])
        assert code == run.EXIT_USAGE and words in capsys.readouterr().err


FASTAI_CSV = "fname,labels,is_valid\na.jpg,cat,False\nb.jpg,dog,True\nc.jpg,cat,TRUE\nd.jpg,dog,0\n"


@pytest.mark.parametrize("column", ["is_valid", "IS_VAL", "valid"])
def test_a_validation_flag_column_splits_true_as_validation_and_false_as_train(tmp_path, column):
    """fastai's ColSplitter column (`is_valid`, common in Kaggle CSVs): true or 1 is
    VALIDATION, false or 0 TRAIN; split names are still read; anything else is an
    invalid_split dead letter."""
    (tmp_path / "m.csv").write_text(
        FASTAI_CSV.replace("is_valid", column) + "e.jpg,cat,1\nf.jpg,dog,test\ng.jpg,cat,maybe\n"
    )
    *rows, bad = read_manifest(str(tmp_path / "m.csv"), RowRules(split_column=column))
    assert [row.split for row in rows] == [
        "train",
        "validation",
        "validation",
        "train",
        "validation",
        "test",
    ]
    assert (bad.reason, bad.line) == (reasons.INVALID_SPLIT, 8)


def test_true_and_false_split_nothing_in_a_column_of_another_name(tmp_path):
    """A boolean column is a validation flag only under a flag's name: `fold` holding
    0/1 (k-fold numbers) is no split column."""
    (tmp_path / "m.csv").write_text(FASTAI_CSV.replace("is_valid", "fold"))
    assert split_name_columns(str(tmp_path / "m.csv"), RowRules(), rows=200) == ()
    (e,) = [
        row
        for row in read_manifest(str(tmp_path / "m.csv"), RowRules(split_column="fold"))
        if row.line == 3
    ]
    assert e.reason == reasons.INVALID_SPLIT


def test_a_validation_flag_column_is_found_and_named_with_what_it_gives(tmp_path, capsys):
    (tmp_path / "m.csv").write_text(FASTAI_CSV)
    assert settled(tmp_path, "--manifest", str(tmp_path / "m.csv")).split_column == "is_valid"
    assert (
        "splits from the column 'is_valid' (false as TRAIN, true as VALIDATION, "
        "0 as TRAIN)" in capsys.readouterr().out
    )


def test_a_validation_flag_beside_one_hot_label_columns_is_the_split_not_a_class(tmp_path):
    """Kaggle's `image_id,cat,dog` one-hot columns: an `is_valid` of 1/0 beside them was
    read as a class too (two labels, a dead letter)."""
    (tmp_path / "m.csv").write_text("image_id,cat,dog,is_valid\na.jpg,1,0,1\nb.jpg,0,1,0\n")
    path = str(tmp_path / "m.csv")
    assert split_name_columns(path, RowRules(), rows=200) == (
        ("is_valid", ("1 as VALIDATION", "0 as TRAIN")),
    )
    rows = read_manifest(path, RowRules(split_column="is_valid"))
    assert [(row.split, row.labels) for row in rows] == [
        ("validation", ("cat",)),
        ("train", ("dog",)),
    ]
