"""The multi-label separator (issue 41): with --label_mode multi and no --label_separator,
the separator the first rows' label fields hold is used and named in the console, or
the run is refused naming the candidates; never a class per combination without a word."""

import json

import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from conftest import encode, photo_like

from image_tfrecords.core.inputs.automl_csv import SeparatorChoice, common_separator
from image_tfrecords.core.inputs.rows import ManifestError
from image_tfrecords.core.inputs.sources import find_manifests, read_manifest
from image_tfrecords.pipeline import run
from image_tfrecords.pipeline.options import ConvertOptions
from image_tfrecords.pipeline.read_choices import settle_read_choices


def test_labels_joined_by_a_semicolon_are_split_and_the_separator_named(tmp_path, capsys):
    """Today `animal;indoor` became one class of its own. The separator is chosen before
    the job (settled), whose rows then carry each label apart: the vocabulary learnt from
    them (multi-label runs end to end in test_convert_e2e.py)."""
    labels = ["animal;indoor", "animal", "plant;outdoor", "animal;outdoor", "plant"]
    rows = ["image,labels"]
    for index, joined in enumerate(labels):
        (tmp_path / f"{index}.jpg").write_bytes(encode(photo_like(8, 8, index), "JPEG"))
        rows.append(f"{index}.jpg,{joined}")
    (tmp_path / "m.csv").write_text("\n".join(rows) + "\n")
    convert = settled(
        tmp_path,
        "--manifest",
        str(tmp_path / "m.csv"),
        "--label_mode",
        "multi",
        "--split_fractions",
        "1,0,0",
    )
    assert "labels joined by ';' (in 3 of the 5 label fields sampled)" in capsys.readouterr().out
    read = list(read_manifest(str(tmp_path / "m.csv"), convert.row_rules()))
    assert {row.split for row in read} == {"train"}
    assert sorted({label for row in read for label in row.labels}) == [
        "animal",
        "indoor",
        "outdoor",
        "plant",
    ]
    assert convert.label_separator == ";"  # summary.json's options.label_separator


def test_two_separators_equally_common_are_refused_naming_both(tmp_path, capsys):
    (tmp_path / "m.csv").write_text('image,labels\na.jpg,"cat,dog"\nb.jpg,cat;dog\nc.jpg,cat\n')
    code = run.main(
        [
            "--manifest",
            str(tmp_path / "m.csv"),
            "--label_mode",
            "multi",
            "--output_dir",
            str(tmp_path / "out"),
        ]
    )
    error = capsys.readouterr().err
    assert code == run.EXIT_USAGE and error.count("\n") == 1
    assert "';' and ',' each occur in 1 of the 3 label fields sampled" in error
    assert "--label_separator" in error and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "fields, chosen",
    [
        (["a;b", "a", "c;d|e"], SeparatorChoice(";", 2, 3)),  # the most common wins
        (["a|b", "c"], SeparatorChoice("|", 1, 2)),
        (["golden retriever", "dog", "cat"], None),  # a space in a label, no separator
        (["cat dog", "dog cat", "cat"], SeparatorChoice(" ", 2, 3)),  # most joined by spaces
        (["golden retriever;dog", "golden retriever"], SeparatorChoice(";", 1, 2)),
        (["cat", "dog"], None),
        ([], None),
    ],
)
def test_common_separator(fields, chosen):
    assert common_separator(fields) == chosen


def settled(tmp_path, *args) -> ConvertOptions:
    convert = PipelineOptions([*args, "--output_dir", str(tmp_path / "out")]).view_as(
        ConvertOptions
    )
    settle_read_choices(convert, find_manifests(convert.manifest, convert.input_format))
    return convert


def test_the_separator_is_chosen_only_where_it_is_left_open(tmp_path, capsys):
    """A given --label_separator stands; single-label mode keeps '|' (the one its
    warning looks for); a separator inside JSON Lines labels, which come as lists, is
    no separator; without any, '|' as before."""
    (tmp_path / "m.csv").write_text("image,labels\na.jpg,cat;dog\n")
    (tmp_path / "v.jsonl").write_text(
        json.dumps(
            {
                "imageGcsUri": "a.jpg",
                "classificationAnnotations": [
                    {"displayName": "cat;dog"},
                    {"displayName": "bird;fish"},
                ],
            }
        )
        + "\n"
    )
    (tmp_path / "p.csv").write_text("image,labels\na.jpg,cat\n")
    manifest = ["--manifest", str(tmp_path / "m.csv")]
    assert (
        settled(
            tmp_path, *manifest, "--label_mode", "multi", "--label_separator", "/"
        ).label_separator
        == "/"
    )
    assert settled(tmp_path, *manifest).label_separator == "|"
    for plain in ("v.jsonl", "p.csv"):
        assert (
            settled(
                tmp_path, "--manifest", str(tmp_path / plain), "--label_mode", "multi"
            ).label_separator
            == "|"
        )
    assert capsys.readouterr().out == ""
    with pytest.raises(ManifestError, match="';' and ','"):
        (tmp_path / "m.csv").write_text('image,labels\na.jpg,"a,b"\nb.jpg,c;d\n')
        settled(tmp_path, *manifest, "--label_mode", "multi")
