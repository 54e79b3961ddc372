"""Extra typed columns (--schema): parsing, dead letters per row, typed features out."""

import json

import numpy as np
import pandas as pd
import pytest
import tensorflow as tf
import tensorflow_transform as tft
from conftest import SAMPLE_DATA, encode, feature, photo_like, read_examples

import image_tfrecords
from image_tfrecords.core.inputs.rows import ManifestError, RowRules
from image_tfrecords.core.inputs.sources import read_manifest
from image_tfrecords.core.records.schema import (
    ExtraColumn,
    SchemaError,
    load_schema,
    parse_value,
    schema_columns,
)
from image_tfrecords.pipeline import run

SCHEMA = {
    "age": "integer",
    "weight": "float",
    "caption": "string",
    "breed": "categorical",
    "mask": "image",
}


def test_schema_inline_or_from_a_file(tmp_path):
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    from_file = load_schema(str(tmp_path / "schema.json"))
    assert from_file == load_schema(json.dumps(SCHEMA))
    assert from_file[3] == ExtraColumn("breed", "categorical")
    assert load_schema(None) == ()


@pytest.mark.parametrize(
    "text, words",
    [
        ('{"age": "int"}', "has type 'int'; use one of integer, float"),
        ('{"my age": "integer"}', "must be letters, digits and _"),
        ('{"label": "string"}', "taken by the output's own features"),
        ('{"age": "integer"', "is not valid JSON"),
        ("/no/such/schema.json", "cannot read the schema file"),
    ],
)
def test_unusable_schemas_are_explained(text, words):
    with pytest.raises(SchemaError, match=words):
        load_schema(text)


@pytest.mark.parametrize(
    "kind, text, value",
    [
        ("integer", "-42", -42),
        ("float", "2.5e3", 2500.0),
        ("string", "", ""),
        ("categorical", "tabby", "tabby"),
    ],
)
def test_values_are_typed(kind, text, value):
    assert parse_value(ExtraColumn("x", kind), text) == value


@pytest.mark.parametrize(
    "kind, text, words",
    [
        ("integer", "4.5", "'4.5' is not an integer"),
        ("integer", str(2**63), "does not fit"),
        ("float", "heavy", "is not a number"),
        ("float", "nan", "finite float32"),
        ("float", "1e39", "finite float32"),
        ("categorical", "", "is empty"),
        ("image", "", "is empty"),
    ],
)
def test_bad_values_name_the_column(kind, text, words):
    with pytest.raises(ValueError, match=f"column 'x'.*{words}|{words}"):
        parse_value(ExtraColumn("x", kind), text)


def test_a_schema_needs_a_header_naming_its_columns(tmp_path):
    rules = RowRules(extra_columns=schema_columns({"age": "integer"}))
    (tmp_path / "a.csv").write_text("train,a.jpg,cat,3\n")
    with pytest.raises(ManifestError, match="needs a header row"):
        list(read_manifest(str(tmp_path / "a.csv"), rules))
    (tmp_path / "b.csv").write_text("split,image_uri,label,weight\ntrain,a.jpg,cat,3\n")
    with pytest.raises(ManifestError, match="no column 'age'"):
        list(read_manifest(str(tmp_path / "b.csv"), rules))


def test_a_schema_column_may_carry_a_header_name_of_its_own(tmp_path):
    """`category` would be taken for the label column; named in the schema, it is extra."""
    rules = RowRules(extra_columns=schema_columns({"category": "categorical"}))
    (tmp_path / "m.csv").write_text("split,image_uri,category,label\ntrain,a.jpg,pet,cat\n")
    (row,) = read_manifest(str(tmp_path / "m.csv"), rules)
    assert (row.labels, row.extras) == (("cat",), ("pet",))


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("schema")
    (root / "img").mkdir()
    rows = ["split,image_uri,label,age,weight,caption,breed,mask"]
    good = {}
    for i in range(8):
        split = "train" if i < 6 else "test"
        (root / "img" / f"{i}.jpg").write_bytes(encode(photo_like(20, 16, i), "JPEG"))
        mask = photo_like(20, 16, 50 + i, "L")
        (root / "img" / f"{i}-mask.png").write_bytes(encode(mask, "PNG"))
        values = (i, 1.5 * i, f"photo, number {i}", ("tabby", "tabby", "siamese")[i % 3])
        rows.append(
            f'{split},img/{i}.jpg,cat,{values[0]},{values[1]},"{values[2]}",'
            f"{values[3]},img/{i}-mask.png"
        )
        good[f"{i}.jpg"] = (*values, np.asarray(mask))
    (root / "img" / "9.jpg").write_bytes(encode(photo_like(20, 16, 9), "JPEG"))
    bad = {
        "train,img/9.jpg,cat,old,1.0,x,tabby,img/0-mask.png": "invalid_value",
        "train,img/9.jpg,cat,3,,x,tabby,img/0-mask.png": "invalid_value",
        "test,img/9.jpg,cat,3,1.0,x,persian,img/0-mask.png": "unseen_category",
        "train,img/9.jpg,cat,3,1.0,x,tabby,img/no-mask.png": "file_not_found",
    }
    (root / "m.csv").write_text("\n".join(rows + list(bad)) + "\n")
    (root / "schema.json").write_text(json.dumps(SCHEMA))
    output = root / "out"
    assert (
        run.main(
            [
                "--manifest",
                str(root / "m.csv"),
                "--output_dir",
                str(output),
                "--schema",
                str(root / "schema.json"),
                "--max_error_fraction",
                "0.5",
            ]
        )
        == 0
    )
    return root, output, good, bad


def test_every_extra_column_becomes_a_typed_feature(converted):
    root, output, good, _ = converted
    vocabulary = [
        w.decode() for w in tft.TFTransformOutput(str(output)).vocabulary_by_name("breed")
    ]
    assert vocabulary == ["siamese", "tabby"]  # sorted, as labels are (--label_order)
    examples = read_examples(f"{output}/*.tfrecord")
    assert len(examples) == len(good)
    for example in examples:
        name = feature(example, "image/filename").decode()
        age, weight, caption, breed, mask = good[name]
        assert feature(example, "age") == age
        assert feature(example, "weight") == pytest.approx(weight)
        assert feature(example, "caption").decode() == caption
        assert feature(example, "breed") == vocabulary.index(breed)
        assert feature(example, "breed/text").decode() == breed
        stored = tf.io.decode_image(feature(example, "mask/encoded")).numpy()
        assert np.array_equal(stored[..., 0], mask)
        assert (
            feature(example, "mask/format"),
            feature(example, "mask/height"),
            feature(example, "mask/channels"),
        ) == (b"png", 16, 1)


def test_bad_extra_values_are_dead_lettered_per_row(converted):
    _, output, good, bad = converted
    dead = [json.loads(line) for line in (output / "errors-00000-of-00001.jsonl").open()]
    assert {d["raw"]: d["reason"] for d in dead} == bad
    messages = {d["reason"]: d["message"] for d in dead}
    assert "column 'mask'" in messages["file_not_found"]
    assert "breed 'persian' does not occur in the TRAIN split" in messages["unseen_category"]
    summary = json.loads((output / "summary.json").read_text())
    assert summary["rows_read"] == len(good) + len(bad) and summary["accounted"]
    assert summary["vocabulary"]["breed"] == ["siamese", "tabby"]
    assert summary["features"]["weight"] == {"dtype": "float", "list": False}
    assert summary["features"]["mask/encoded"] == {"dtype": "bytes", "list": False}


def test_a_dataframe_with_a_schema_dict(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for i in range(3):
        (tmp_path / f"{i}.jpg").write_bytes(encode(photo_like(12, 10, i), "JPEG"))
    frame = pd.DataFrame(
        {
            "image_uri": [f"{i}.jpg" for i in range(3)],
            "label": ["a"] * 3,
            "split": ["train"] * 3,
            "score": [0.5, 0.25, 1.0],
        }
    )
    result = image_tfrecords.convert(frame, str(tmp_path / "out"), schema={"score": "float"})
    assert result.ok
    scores = {
        feature(e, "image/filename").decode(): feature(e, "score")
        for e in read_examples(result.files["train"][0])
    }
    assert scores == {"0.jpg": 0.5, "1.jpg": 0.25, "2.jpg": 1.0}


def test_schema_problems_are_usage_errors(tmp_path, capsys):
    (tmp_path / "m.csv").write_text("split,image_uri,label\ntrain,a.jpg,cat\n")
    code = run.main(
        [
            "--manifest",
            str(tmp_path / "m.csv"),
            "--output_dir",
            str(tmp_path / "o"),
            "--schema",
            '{"age": "number"}',
        ]
    )
    assert code == run.EXIT_USAGE and "has type 'number'" in capsys.readouterr().err
    code = run.main(
        [
            "--manifest",
            str(tmp_path / "m.csv"),
            "--output_dir",
            str(tmp_path / "o"),
            "--schema",
            '{"age": "integer"}',
        ]
    )
    assert code == run.EXIT_USAGE and "no column 'age'" in capsys.readouterr().err


def test_the_bundled_extra_columns_sample_converts(tmp_path):
    assert (
        run.main(
            [
                "--manifest",
                str(SAMPLE_DATA / "extra_columns.csv"),
                "--output_dir",
                str(tmp_path),
                "--schema",
                str(SAMPLE_DATA / "extra_columns.schema.json"),
                "--max_error_fraction",
                "0.25",
            ]
        )
        == 0
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["examples_written"], summary["errors"]["by_reason"]) == (
        17,
        {"invalid_value": 1, "unseen_category": 2},
    )
    sides = {
        feature(e, "image/filename").decode(): feature(e, "long_side")
        for e in read_examples(f"{tmp_path}/*.tfrecord")
    }
    assert sides["cat_06.jpg"] == 97  # the photo's real longer side
