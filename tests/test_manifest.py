"""Manifest parsing: headers, quoting, encodings, line numbers and every rejection reason."""

import bz2
import gzip
import json
import lzma

import pytest

from image_tfrecords.core.inputs.automl_csv import AUTOML_LAYOUT, read_header
from image_tfrecords.core.inputs.boxes import parse_box
from image_tfrecords.core.inputs.rows import (
    DiscardedRow,
    ManifestError,
    RowRules,
    assign_split,
    resolve_uri,
)
from image_tfrecords.core.inputs.sources import check_sources, find_manifests, read_manifest
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.records import Box, ManifestRow
from image_tfrecords.core.records.splits import SPLITS, normalise_split


def check_manifest(path, rules):
    """The launcher's checks of one manifest before the job."""
    check_sources(find_manifests([str(path)]), rules)


def write(path, text, encoding="utf-8"):
    path.write_bytes(text.encode(encoding) if isinstance(text, str) else text)
    return str(path)


def parse(tmp_path, text, name="manifest.csv"):
    return list(read_manifest(write(tmp_path / name, text)))


def test_headerless_automl_rows_resolve_relative_uris(tmp_path):
    rows = parse(
        tmp_path, "TRAIN,images/a.jpg,cat\nvalidation,/abs/b.png,dog\nTest,gs://bucket/c.jpg,cat\n"
    )
    assert rows == [
        ManifestRow(
            str(tmp_path / "manifest.csv"),
            1,
            "TRAIN,images/a.jpg,cat",
            "train",
            str(tmp_path / "images/a.jpg"),
            ("cat",),
        ),
        ManifestRow(
            str(tmp_path / "manifest.csv"),
            2,
            "validation,/abs/b.png,dog",
            "validation",
            "/abs/b.png",
            ("dog",),
        ),
        ManifestRow(
            str(tmp_path / "manifest.csv"),
            3,
            "Test,gs://bucket/c.jpg,cat",
            "test",
            "gs://bucket/c.jpg",
            ("cat",),
        ),
    ]


def test_header_by_name_in_any_order_is_skipped(tmp_path):
    rows = parse(tmp_path, "label,Image_URI,split\ncat,a.jpg,train\n")
    assert [(r.line, r.split, r.uri.rsplit("/", 1)[1], r.labels[0]) for r in rows] == [
        (2, "train", "a.jpg", "cat")
    ]


def test_header_without_label_column_is_a_manifest_error(tmp_path):
    path = write(tmp_path / "m.csv", "split,image_uri,kind\ntrain,a.jpg,cat\n")
    with pytest.raises(ManifestError, match="names no label column"):
        read_header(path)


def test_quoted_fields_unicode_crlf_bom_and_blank_lines(tmp_path):
    text = (
        "\ufeffsplit,image_uri,label\r\n"
        'train,"images/fleur, été 01.jpg","a ""quoted"" label"\r\n'
        "\r\n"
        "test,images/b.jpg,chat noir\r\n"
    )
    rows = parse(tmp_path, text)
    assert [(r.line, r.uri.rsplit("/", 1)[1], r.labels[0]) for r in rows] == [
        (2, "fleur, été 01.jpg", 'a "quoted" label'),
        (4, "b.jpg", "chat noir"),
    ]
    assert rows[0].raw == 'train,"images/fleur, été 01.jpg","a ""quoted"" label"'


def test_bom_before_a_headerless_first_row(tmp_path):
    rows = parse(tmp_path, "\ufeffTRAIN,a.jpg,cat\n")
    assert rows[0].split == "train" and rows[0].line == 1


def test_trailing_empty_fields_are_tolerated(tmp_path):
    assert parse(tmp_path, "train,a.jpg,cat,,\n")[0].labels == ("cat",)


@pytest.mark.parametrize(
    "line, reason",
    [
        ("TRIAN,a.jpg,cat", reasons.INVALID_SPLIT),
        ("train,a.jpg,", reasons.MISSING_LABEL),
        ("train,,cat", reasons.MISSING_URI),
        ("train,a.jpg,cat,extra", reasons.WRONG_COLUMN_COUNT),
        ("train", reasons.WRONG_COLUMN_COUNT),
        ('train,"a.jpg"x,cat', reasons.MALFORMED_ROW),
        ('train,"a.jpg,cat', reasons.MALFORMED_ROW),
    ],
)
def test_each_bad_row_is_a_dead_letter_with_its_reason(tmp_path, line, reason):
    rows = parse(tmp_path, f"train,good.jpg,cat\n{line}\ntest,good2.jpg,dog\n")
    assert [type(r) for r in rows] == [ManifestRow, DeadLetter, ManifestRow]
    bad = rows[1]
    assert (bad.line, bad.raw, bad.reason) == (2, line, reason)
    assert bad.message


def test_unterminated_quote_costs_only_its_own_row(tmp_path):
    rows = parse(tmp_path, 'train,"a.jpg,cat\ntrain,b.jpg,dog\ntrain,c.jpg,cat\n')
    assert [getattr(r, "reason", "ok") for r in rows] == [reasons.MALFORMED_ROW, "ok", "ok"]


def test_invalid_utf8_row_is_rejected_alone_and_dead_letter_is_valid_json(tmp_path):
    rows = parse(tmp_path, b"train,a.jpg,cat\ntrain,caf\xe9.jpg,cat\ntrain,b.jpg,dog\n")
    assert [getattr(r, "reason", "ok") for r in rows] == ["ok", reasons.INVALID_ENCODING, "ok"]
    record = json.loads(rows[1].to_json())
    assert record["raw"] == "train,caf\\xe9.jpg,cat" and record["line"] == 2


def test_gzip_manifest_is_read_by_extension(tmp_path):
    path = tmp_path / "m.csv.gz"
    path.write_bytes(gzip.compress(b"split,image_uri,label\ntrain,a.jpg,cat\n"))
    assert [r.labels for r in read_manifest(str(path))] == [("cat",)]


@pytest.mark.parametrize(
    "name, compress",
    [("m.csv.gz", gzip.compress), ("m.csv.bz2", bz2.compress), ("m.csv.lzma", lzma.compress)],
)
def test_a_cut_off_compressed_manifest_fails_instead_of_losing_its_tail(tmp_path, name, compress):
    data = compress("".join(f"train,{i}.jpg,cat\n" for i in range(5000)).encode())
    path = write(tmp_path / name, data[: len(data) // 2])
    with pytest.raises(ManifestError, match=f"{name}: cannot read the manifest: .*ended"):
        list(read_manifest(path))


def test_a_gz_manifest_that_is_not_gzip_is_a_manifest_error(tmp_path):
    path = write(tmp_path / "m.csv.gz", "train,a.jpg,cat\n")
    for read in (read_header, lambda p: list(read_manifest(p))):
        with pytest.raises(ManifestError, match="cannot read the manifest: Not a gzipped file"):
            read(path)


def test_read_header_defaults_to_automl_order(tmp_path):
    assert read_header(write(tmp_path / "m.csv", "train,a.jpg,cat\n")) is AUTOML_LAYOUT


def test_resolve_uri():
    assert resolve_uri("x/y.jpg", "/data") == "/data/x/y.jpg"
    assert resolve_uri("s3://b/k.jpg", "/data") == "s3://b/k.jpg"
    assert resolve_uri("/abs.jpg", "gs://b/dir") == "/abs.jpg"


@pytest.mark.parametrize(
    "written, folder, resolved",
    [
        ("../img/./a.jpg", "/data/manifests", "/data/img/a.jpg"),
        ("img//a.jpg", "/data", "/data/img/a.jpg"),
        ("/x/../y//./a.jpg", "/data", "/y/a.jpg"),
        ("//x/a.jpg", "/data", "/x/a.jpg"),
        ("../img/a.jpg", "gs://b/data", "gs://b/img/a.jpg"),
        ("gs://b/data/../img//a.jpg", "/data", "gs://b/img/a.jpg"),
        ("s3://b/../../a.jpg", "/data", "s3://b/a.jpg"),  # never above the bucket
        ("gs://b//a.jpg", "/data", "gs://b/a.jpg"),
        ("hdfs://datasets/pets/./a.jpg", "/data", "hdfs://datasets/pets/a.jpg"),
    ],
)
def test_resolved_uris_are_normalised_so_one_file_has_one_name(written, folder, resolved):
    assert resolve_uri(written, folder) == resolved


def test_a_row_keeps_its_split_from_the_uri_as_written_and_gets_the_normalised_uri(tmp_path):
    """Splits of existing manifests do not move: UNASSIGNED rows hash what was written."""
    written = [f"img/{i}/../a{i}.jpg" for i in range(40)]
    path = write(tmp_path / "m.csv", "".join(f"UNASSIGNED,{uri},cat\n" for uri in written))
    rows = list(read_manifest(path))
    assert [row.uri for row in rows] == [str(tmp_path / f"img/a{i}.jpg") for i in range(40)]
    assert [row.split for row in rows] == [assign_split(uri, (0.8, 0.1, 0.1)) for uri in written]
    assert [row.split for row in rows] != [
        assign_split(f"img/a{i}.jpg", (0.8, 0.1, 0.1)) for i in range(40)
    ]


@pytest.mark.parametrize(
    "text",
    [
        "UNASSIGNED,img/a.jpg,cat\n",
        "unassigned,img/a.jpg,cat\n",
        ",img/a.jpg,cat\n",
        "img/a.jpg,cat\n",
        "image_uri,label\nimg/a.jpg,cat\n",
        "label,path\ncat,img/a.jpg\n",
    ],
)
def test_rows_without_a_split_get_the_hash_assigned_one(tmp_path, text):
    (row,) = parse(tmp_path, text)
    assert row.split == assign_split("img/a.jpg", (0.8, 0.1, 0.1))
    assert row.uri == str(tmp_path / "img/a.jpg") and row.labels == ("cat",)


def test_assigned_splits_follow_the_fractions_and_ignore_row_order(tmp_path):
    uris = [f"gs://bucket/photos/{i:05d}.jpg" for i in range(20000)]
    splits = [assign_split(uri, (0.7, 0.2, 0.1)) for uri in uris]
    for split, fraction in zip(SPLITS, (0.7, 0.2, 0.1)):
        assert abs(splits.count(split) / len(uris) - fraction) < 0.01
    forward = parse(tmp_path, "".join(f"UNASSIGNED,{u},x\n" for u in uris[:50]), "a.csv")
    backward = parse(tmp_path, "".join(f"UNASSIGNED,{u},x\n" for u in uris[49::-1]), "b.csv")
    assert {r.uri: r.split for r in forward} == {r.uri: r.split for r in backward}
    assert {assign_split(u, (1, 0, 0)) for u in uris[:100]} == {"train"}
    assert {assign_split(u, (0, 0, 1)) for u in uris[:100]} == {"test"}


def test_the_split_depends_on_the_uri_as_written_not_the_manifests_location(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = parse(tmp_path / "a", "img/x.jpg,cat\n")[0]
    second = parse(tmp_path / "b", "img/x.jpg,cat\n")[0]
    assert first.split == second.split and first.uri != second.uri


MULTI = RowRules(label_mode="multi")


@pytest.mark.parametrize(
    "text, split, labels",
    [
        ("train,a.jpg,cat,dog\n", "train", ("cat", "dog")),
        ("TEST,a.jpg,cat\n", "test", ("cat",)),
        ("a.jpg,cat,dog,cat\n", None, ("cat", "dog")),
        ("UNASSIGNED,a.jpg,cat|dog,,\n", None, ("cat", "dog")),
        ("split,image_uri,label\nvalidation,a.jpg, cat | dog \n", "validation", ("cat", "dog")),
    ],
)
def test_multi_label_rows(tmp_path, text, split, labels):
    (row,) = list(read_manifest(write(tmp_path / "m.csv", text), MULTI))
    assert row.labels == labels and row.uri == str(tmp_path / "a.jpg")
    assert row.split == (split or assign_split("a.jpg", MULTI.split_fractions))


def test_multi_label_rows_without_labels_are_dead_letters(tmp_path):
    rows = list(read_manifest(write(tmp_path / "m.csv", "train,a.jpg\ntrain,b.jpg,|,\n"), MULTI))
    assert [r.reason for r in rows] == [reasons.MISSING_LABEL] * 2


def test_single_label_rules_do_not_split_on_the_separator(tmp_path):
    (row,) = list(read_manifest(write(tmp_path / "m.csv", "train,a.jpg,cat|dog\n")))
    assert row.labels == ("cat|dog",)


def jsonl(**item):
    return json.dumps(item)


def test_vertex_ai_jsonl_lines(tmp_path):
    lines = [
        jsonl(
            imageGcsUri="gs://b/a.jpg",
            classificationAnnotation={"displayName": "cat"},
            dataItemResourceLabels={"aiplatform.googleapis.com/ml_use": "training"},
        ),
        jsonl(
            imageGcsUri="img/b.jpg",
            classificationAnnotations=[{"displayName": "cat"}, {"displayName": "dog"}],
            dataItemResourceLabels={"aiplatform.googleapis.com/ml_use": "test"},
        ),
        jsonl(imageGcsUri="gs://b/c.jpg", classificationAnnotation={"displayName": "dog"}),
        "not json",
        jsonl(classificationAnnotation={"displayName": "dog"}),
        jsonl(imageGcsUri="gs://b/d.jpg", boundingBoxAnnotations=[{"displayName": "dog"}]),
        jsonl(
            imageGcsUri="gs://b/e.jpg",
            classificationAnnotation={"displayName": "x"},
            dataItemResourceLabels={"aiplatform.googleapis.com/ml_use": "holdout"},
        ),
        "[1, 2]",
    ]
    path = write(tmp_path / "import.jsonl", "\n".join(lines) + "\n")
    single = list(read_manifest(path))
    assert [(r.line, r.split, r.uri, r.labels) for r in single[:1]] == [
        (1, "train", "gs://b/a.jpg", ("cat",))
    ]
    assert single[2].split == assign_split("gs://b/c.jpg", (0.8, 0.1, 0.1))
    assert [getattr(r, "reason", "ok") for r in single] == [
        "ok",
        reasons.MULTIPLE_LABELS,
        "ok",
        reasons.MALFORMED_ROW,
        reasons.MISSING_URI,
        reasons.UNSUPPORTED_ANNOTATION,
        reasons.INVALID_SPLIT,
        reasons.MALFORMED_ROW,
    ]
    multi = list(read_manifest(path, MULTI))
    assert (multi[1].split, multi[1].uri, multi[1].labels) == (
        "test",
        str(tmp_path / "img/b.jpg"),
        ("cat", "dog"),
    )


def test_an_invalid_split_is_quoted_as_written(tmp_path):
    (bad,) = parse(tmp_path, "TRIAN,a.jpg,cat\n")
    assert (bad.split, bad.message) == (
        "TRIAN",
        "split 'TRIAN' is not one of TRAIN, VALIDATION (or VAL, VALID, EVAL, DEV), "
        "TEST, UNASSIGNED or DISCARD",
    )


DETECTION = RowRules(label_mode="detection")


def detection_rows(tmp_path, text, name="boxes.csv"):
    return list(read_manifest(write(tmp_path / name, text), DETECTION))


@pytest.mark.parametrize(
    "text, split, box",
    [
        ("TRAIN,a.jpg,cat,0.1,0.2,,,0.5,0.6,,\n", "train", Box(0.1, 0.2, 0.5, 0.6)),
        ("test,a.jpg,cat,0.1,0.2,,,0.5,0.6\n", "test", Box(0.1, 0.2, 0.5, 0.6)),
        ("a.jpg,cat,0.1,0.2,,,0.5,0.6,,\n", None, Box(0.1, 0.2, 0.5, 0.6)),
        ("UNASSIGNED,a.jpg,cat,0.1,0.2,0.5,0.2,0.5,0.6,0.1,0.6\n", None, Box(0.1, 0.2, 0.5, 0.6)),
        (
            "validation,a.jpg,cat,0.5,0.6,0.1,0.6,0.1,0.2,0.5,0.2\n",
            "validation",
            Box(0.1, 0.2, 0.5, 0.6),
        ),  # four vertices in another order: the same rectangle
        (
            "set,uri,ymax,xmin,label,ymin,xmax\ntrain,a.jpg,0.6,0.1,cat,0.2,0.5\n",
            "train",
            Box(0.1, 0.2, 0.5, 0.6),
        ),
    ],
)
def test_detection_rows_are_one_box_each(tmp_path, text, split, box):
    (row,) = detection_rows(tmp_path, text)
    assert (row.uri, row.labels, row.boxes) == (str(tmp_path / "a.jpg"), ("cat",), (box,))
    assert row.split == (split or assign_split("a.jpg", DETECTION.split_fractions))


def test_a_detection_row_without_label_and_box_is_an_image_without_objects(tmp_path):
    (row,) = detection_rows(tmp_path, "TRAIN,a.jpg,,,,,,,,,\n")
    assert (row.split, row.labels, row.boxes) == ("train", (), ())


@pytest.mark.parametrize(
    "line, reason, words",
    [
        ("train,a.jpg,cat,0.1,0.2,,,1.5,0.6,,", reasons.BOX_OUT_OF_RANGE, "between 0 and 1"),
        ("train,a.jpg,cat,-0.1,0.2,,,0.5,0.6,,", reasons.BOX_OUT_OF_RANGE, "between 0 and 1"),
        ("train,a.jpg,cat,nan,0.2,,,0.5,0.6,,", reasons.BOX_OUT_OF_RANGE, "between 0 and 1"),
        ("train,a.jpg,cat,0.5,0.2,,,0.5,0.6,,", reasons.EMPTY_BOX, "x_min must be below x_max"),
        ("train,a.jpg,cat,0.1,0.7,,,0.5,0.6,,", reasons.EMPTY_BOX, "y_min below y_max"),
        ("train,a.jpg,cat,0.1,0.2,0.1,0.2,0.1,0.2,0.1,0.2", reasons.EMPTY_BOX, "x_min must"),
        ("train,a.jpg,cat,0.1,zero,,,0.5,0.6,,", reasons.INVALID_BOX, "not a number"),
        ("train,a.jpg,cat,0.1,0.2,,,0.5,,,", reasons.INVALID_BOX, "or four x,y vertices"),
        ("train,a.jpg,cat", reasons.INVALID_BOX, "or four x,y vertices"),
        ("train,a.jpg,,0.1,0.2,,,0.5,0.6,,", reasons.MISSING_LABEL, "no label"),
        ("train,a.jpg,cat,0.1,0.2,,,0.5,0.6,,,0.7", reasons.WRONG_COLUMN_COUNT, "3 to 11"),
        ("train,a.jpg", reasons.WRONG_COLUMN_COUNT, "3 to 11"),
    ],
)
def test_invalid_boxes_are_dead_lettered_with_the_reason(tmp_path, line, reason, words):
    (bad,) = detection_rows(tmp_path, line + "\n")
    assert isinstance(bad, DeadLetter) and bad.reason == reason
    assert words in bad.message


def test_parse_box_keeps_two_vertices_as_written():
    assert parse_box(["0.25", "0", "", "", "1", "0.75", "", ""]) == Box(0.25, 0.0, 1.0, 0.75)
    assert parse_box(["0.5", "0.2", "", "", "0.1", "0.6", "", ""])[0] == reasons.EMPTY_BOX


def test_a_detection_header_must_name_the_box_columns(tmp_path):
    path = write(tmp_path / "m.csv", "split,image_uri,label\ntrain,a.jpg,cat\n")
    with pytest.raises(ManifestError, match="names no xmin column .*pass --label_mode single"):
        read_header(path, DETECTION)
    partial = write(tmp_path / "p.csv", "image_uri,label,xmin,ymin,xmax\na.jpg,cat,0,0,1\n")
    with pytest.raises(
        ManifestError,
        match=r"names no ymax column \(expected one of: "
        r"y_max, y_relative_max, ymax\)$",
    ):
        read_header(partial, DETECTION)
    assert read_header(path) is not None  # the same header is fine for classification


def test_a_classification_row_with_box_fields_hints_at_detection(tmp_path):
    (bad,) = parse(tmp_path, "TRAIN,a.jpg,cat,0.1,0.2,,,0.5,0.6,,\n")
    assert bad.reason == reasons.WRONG_COLUMN_COUNT and "--label_mode detection" in bad.message


def test_vertex_ai_jsonl_boxes_are_one_row_each_and_a_bad_box_costs_only_itself(tmp_path):
    boxes = [
        {"displayName": "cat", "xMin": 0.1, "yMin": 0.2, "xMax": 0.5, "yMax": 0.6},
        {"displayName": "dog", "xMin": "0.6", "yMin": "0.1", "xMax": "0.9", "yMax": "0.4"},
        {"displayName": "dog", "xMin": 0.7, "yMin": 0.1, "xMax": 0.2, "yMax": 0.4},
        "not an object",
    ]
    lines = [
        jsonl(
            imageGcsUri="gs://b/a.jpg",
            boundingBoxAnnotations=boxes,
            dataItemResourceLabels={"aiplatform.googleapis.com/ml_use": "training"},
        ),
        jsonl(imageGcsUri="gs://b/empty.jpg"),
    ]
    rows = list(read_manifest(write(tmp_path / "boxes.jsonl", "\n".join(lines)), DETECTION))
    assert [(r.line, r.labels, r.boxes) for r in rows if isinstance(r, ManifestRow)] == [
        (1, ("cat",), (Box(0.1, 0.2, 0.5, 0.6),)),
        (1, ("dog",), (Box(0.6, 0.1, 0.9, 0.4),)),
        (2, (), ()),
    ]
    bad = [r for r in rows if isinstance(r, DeadLetter)]
    assert [(r.line, r.reason, r.uri, r.split) for r in bad] == [
        (1, reasons.EMPTY_BOX, "gs://b/a.jpg", "train"),
        (1, reasons.MALFORMED_ROW, "gs://b/a.jpg", "train"),
    ]
    assert bad[0].message.startswith("boundingBoxAnnotations[2]: ")
    assert json.loads(bad[0].raw) == boxes[2]


# --- headers as real datasets write them -------------------------------------------------


@pytest.mark.parametrize(
    "text, uri, labels",
    [
        ("image_id,label\nimg/1.jpg,3\n", "img/1.jpg", ("3",)),  # cassava-style
        ("Image,Id\n00022e1a.jpg,w_e15442c\n", "00022e1a.jpg", ("w_e15442c",)),  # whale
        ("filename,class\nphotos/a.png,cat\n", "photos/a.png", ("cat",)),
        ("path,label_name\n/abs/b.jpg,dog\n", "/abs/b.jpg", ("dog",)),
        ("id,Image\nwhale,a.jpg\n", "a.jpg", ("whale",)),  # id beside an image, either side
        ("fname,target\na.jpg,1\n", "a.jpg", ("1",)),
    ],
)
def test_headers_of_real_datasets_are_mapped_by_name(tmp_path, text, uri, labels):
    (row,) = parse(tmp_path, text)
    assert (row.line, row.labels) == (2, labels)
    assert row.uri == (uri if uri.startswith("/") else str(tmp_path / uri))


def test_a_header_of_unknown_names_is_refused_naming_its_columns_and_the_options(tmp_path):
    path = write(tmp_path / "m.csv", "picture,kind\na.jpg,cat\nimg/b.png,dog\nc.jpg,cat\n")
    for read in (read_header, lambda p: list(read_manifest(p))):
        with pytest.raises(ManifestError) as refused:
            read(path)
        message = str(refused.value)
        assert "'picture', 'kind'" in message and "\n" not in message
        assert "--uri_column NAME" in message and "--label_column NAME" in message


def test_a_first_row_with_an_image_path_is_data_even_beside_odd_rows(tmp_path):
    rows = parse(tmp_path, "train,a.jpg,cat\nx,y,z\nb.jpg,dog\n")
    assert [getattr(r, "reason", "ok") for r in rows] == ["ok", reasons.INVALID_SPLIT, "ok"]


def test_one_known_name_and_no_image_path_is_a_header(tmp_path):
    """Kaggle's plant pathology: image ids without an extension under `image_id`."""
    path = write(tmp_path / "m.csv", "image_id,kind\nTrain_0,a\n")
    with pytest.raises(ManifestError, match="names no label column"):
        read_header(path)


def test_uri_and_label_column_options_name_the_columns_and_override_known_names(tmp_path):
    path = write(tmp_path / "m.csv", "picture,kind,label\na.jpg,cat,ignored\n")
    (row,) = read_manifest(path, RowRules(uri_column="Picture", label_column="kind"))
    assert (row.uri, row.labels) == (str(tmp_path / "a.jpg"), ("cat",))
    with pytest.raises(ManifestError, match="--label_column 'breed' is not a column"):
        read_header(path, RowRules(uri_column="picture", label_column="breed"))
    # Naming a column makes the first row a header, even over image paths.
    (row,) = read_manifest(
        write(tmp_path / "n.csv", "x.jpg,y\na.jpg,cat\n"),
        RowRules(uri_column="x.jpg", label_column="y"),
    )
    assert row.labels == ("cat",) and row.line == 2


ONE_HOT = "image_id,healthy,multiple_diseases,rust,scab\n"


def test_one_hot_columns_in_multi_mode_give_the_names_of_the_columns_holding_1(tmp_path):
    text = ONE_HOT + "a.jpg,0,0,1,1\nb.jpg,1,0,0,0\nc.jpg,0,0,0,0\nd.jpg,0,2,0,0\n"
    rows = list(read_manifest(write(tmp_path / "m.csv", text), MULTI))
    assert [r.labels for r in rows[:2]] == [("rust", "scab"), ("healthy",)]
    assert [(r.reason, r.line) for r in rows[2:]] == [
        (reasons.MISSING_LABEL, 4),
        (reasons.INVALID_VALUE, 5),
    ]
    assert "'multiple_diseases' holds '2'" in rows[3].message


def test_one_hot_columns_in_single_mode_need_exactly_one_1(tmp_path):
    text = ONE_HOT + "a.jpg,0,0,1,0\nb.jpg,0,0,1,1\nc.jpg,0,0,0,0\n"
    rows = parse(tmp_path, text)
    assert rows[0].labels == ("rust",)  # never "0" or "1"
    assert [r.reason for r in rows[1:]] == [reasons.MULTIPLE_LABELS, reasons.MISSING_LABEL]
    assert "--label_mode multi" in rows[1].message


def test_columns_that_are_not_all_0_or_1_are_no_one_hot_labels(tmp_path):
    path = write(tmp_path / "m.csv", "image,width,height\na.jpg,640,480\n")
    with pytest.raises(ManifestError, match="names no label column"):
        read_header(path)


# --- splits -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "written, split",
    [
        ("TRAIN", "train"),
        (" Validation ", "validation"),
        ("test", "test"),
        ("val", "validation"),
        ("VALID", "validation"),
        ("Eval", "validation"),
        ("dev", "validation"),
        ("training", "train"),
        ("Training_Set", "train"),
        ("test-set", "test"),
        ("testing", "test"),
        ("devset", "validation"),
        ("validation_set", "validation"),
        ("set", None),
        ("dataset", None),
        ("", None),
        ("UNASSIGNED", None),
        ("DISCARD", None),
        ("TRIAN", None),
    ],
)
def test_normalise_split(written, split):
    assert normalise_split(written) == split


def test_discard_rows_are_left_out_apart_from_dead_letters(tmp_path):
    text = "DISCARD,a.jpg,cat\ndiscard,,\nval,b.jpg,dog\nDev,c.jpg,dog\n"
    rows = parse(tmp_path, text)
    assert rows[:2] == [
        DiscardedRow(str(tmp_path / "manifest.csv"), 1),
        DiscardedRow(str(tmp_path / "manifest.csv"), 2),
    ]
    assert [r.split for r in rows[2:]] == ["validation", "validation"]
    (row,) = list(
        read_manifest(
            write(tmp_path / "d.csv", "Discard,a.jpg,cat,0.1\ndev,a.jpg,cat,0.1,0.2,,,0.5,0.6,,\n"),
            DETECTION,
        )
    )[1:]
    assert row.split == "validation"


# --- the label mode's shape, before the job -----------------------------------------------


@pytest.mark.parametrize(
    "text, rules, flag",
    [
        (
            "TRAIN,a.jpg,cat,0.1,0.2,,,0.5,0.6,,\nTEST,b.jpg,dog,0.1,0.2,,,0.5,0.6,,\n",
            RowRules(),
            "--label_mode detection",
        ),
        ("a.jpg,cat,0.1,0.2,0.5,0.2,0.5,0.6,0.1,0.6\n", MULTI, "--label_mode detection"),
        (
            "filename,width,height,class,xmin,ymin,xmax,ymax\na.jpg,64,48,cat,1,2,30,40\n",
            RowRules(),
            "--label_mode detection",
        ),
        (
            "train,a.jpg,cat,dog\ntrain,b.jpg,cat,bird\ntest,c.jpg,dog\n",
            RowRules(),
            "--label_mode multi",
        ),
        ("train,a.jpg,cat\ntrain,b.jpg,dog\n", DETECTION, "--label_mode single"),
    ],
)
def test_a_manifest_of_another_label_modes_shape_is_refused_naming_the_flag(
    tmp_path, text, rules, flag
):
    with pytest.raises(ManifestError, match=flag):
        check_manifest(write(tmp_path / "m.csv", text), rules)


@pytest.mark.parametrize(
    "text, rules",
    [
        ("TRAIN,a.jpg,\nTEST,b.jpg,\n", DETECTION),  # all negatives: odd but legal
        ("train,a.jpg,cat,dog\ntrain,b.jpg,cat\ntest,c.jpg,dog\n", RowRules()),  # one odd row
        ("train,a.jpg,cat,dog\n", MULTI),
        ("TRAIN,a.jpg,cat,0.1,0.2,,,0.5,0.6,,\n", DETECTION),
        (",,\n\n  ,\ntrain,a.jpg,cat\n", RowRules()),  # empty rows are dead letters, no shape
    ],
)
def test_a_manifest_that_may_fit_its_label_mode_passes(tmp_path, text, rules):
    check_manifest(write(tmp_path / "m.csv", text), rules)


def test_jsonl_shapes_of_another_label_mode_are_refused(tmp_path):
    def check(items, rules):
        path = write(tmp_path / "i.jsonl", "\n".join(jsonl(**item) for item in items))
        check_manifest(path, rules)

    several = {
        "imageGcsUri": "a.jpg",
        "classificationAnnotations": [{"displayName": "cat"}, {"displayName": "dog"}],
    }
    one = {"imageGcsUri": "b.jpg", "classificationAnnotation": {"displayName": "cat"}}
    boxes = {
        "imageGcsUri": "c.jpg",
        "boundingBoxAnnotations": [
            {"displayName": "cat", "xMin": 0.1, "yMin": 0.1, "xMax": 0.5, "yMax": 0.5}
        ],
    }
    with pytest.raises(
        ManifestError, match="several classificationAnnotations; pass --label_mode multi"
    ):
        check([one, one, several], RowRules())
    with pytest.raises(ManifestError, match="pass --label_mode detection"):
        check([boxes, boxes, one], MULTI)
    with pytest.raises(ManifestError, match="pass --label_mode single"):
        check([one, one, boxes], DETECTION)
    check([one, several], MULTI)
    check([boxes, one], DETECTION)
