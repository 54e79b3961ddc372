"""Labels that are probably a mistake (core/worker/label_checks.py): the separator inside a
single-mode label, case or space variants, whole-number labels whose ids are not their
numbers; warned in the console, summary.json and report.html with their first rows, and
errors with --strict_labels."""

import json

from conftest import encode, photo_like
from test_report_page import Page, chromium

from image_tfrecords.core.records.choices import LabelMode
from image_tfrecords.core.worker.label_checks import (
    FIRST_ROWS,
    LabelSeen,
    label_warnings,
    merge_seen,
)
from image_tfrecords.pipeline import run


def seen(**rows: int) -> dict[str, LabelSeen]:
    return {
        label.replace("_", " "): LabelSeen(
            count, tuple(f"m.csv:{line}" for line in range(1, min(count, 3) + 1))
        )
        for label, count in rows.items()
    }


def test_the_separator_inside_a_single_mode_label_is_named_not_in_multi_mode():
    labels = {"red|blue": LabelSeen(2, ("m.csv:4", "m.csv:9")), "red": LabelSeen(1, ("m.csv:1",))}
    (warning,) = label_warnings(labels, ["red", "red|blue"], LabelMode.SINGLE, "|")
    assert (warning.kind, warning.labels, warning.rows, warning.first_rows) == (
        "separator",
        ("red|blue",),
        2,
        ("m.csv:4", "m.csv:9"),
    )
    assert "'red|blue' holds the multi-label separator '|'" in warning.message
    assert label_warnings(labels, ["red", "red|blue"], LabelMode.MULTI, "|") == ()


def test_labels_differing_in_case_or_spaces_are_one_warning_with_their_first_rows():
    labels = {
        "Red": LabelSeen(1, ("m.csv:7",)),
        "red": LabelSeen(5, ("m.csv:1", "m.csv:2", "m.csv:3")),
        " red": LabelSeen(1, ("m.csv:12",)),
        "blue": LabelSeen(2, ("m.csv:4",)),
    }
    (warning,) = label_warnings(labels, ["red", "blue", "Red", " red"], LabelMode.SINGLE, "|")
    assert warning.kind == "variants" and warning.labels == (" red", "Red", "red")
    assert warning.rows == 7 and warning.first_rows == ("m.csv:1", "m.csv:2", "m.csv:3")
    assert "differ only in case or surrounding spaces: they are 3 classes" in warning.message


def test_numbers_as_labels_warn_only_when_their_ids_are_not_the_numbers():
    labels = seen(**{"0": 1, "1": 4, "2": 9})
    (warning,) = label_warnings(labels, ["2", "1", "0"], LabelMode.SINGLE, "|")
    assert warning.kind == "numeric" and warning.labels == ("0", "2")
    assert "'0' has id 2, '2' has id 0" in warning.message and "--vocabulary" in warning.message
    assert label_warnings(labels, ["0", "1", "2"], LabelMode.SINGLE, "|") == ()
    # Detection's ids start at 1 (0 is the background): COCO-style 1..N numbers fit.
    assert label_warnings(seen(**{"1": 3, "2": 1}), ["1", "2"], LabelMode.DETECTION, "|") == ()
    assert label_warnings(seen(cat=2, **{"3": 1}), ["cat", "3"], LabelMode.SINGLE, "|") == ()


def test_seen_rows_merge_across_chunks_keeping_the_first_rows_in_order():
    merged = merge_seen(
        [LabelSeen(2, ("b.csv:5", "a.csv:9")), LabelSeen(3, ("a.csv:10", "a.csv:2"))]
    )
    assert merged.rows == 5 and merged.first_rows == ("a.csv:2", "a.csv:9", "a.csv:10")
    assert len(merged.first_rows) == FIRST_ROWS


def manifest(tmp_path, labels):
    for index in range(len(labels)):
        (tmp_path / f"{index}.jpg").write_bytes(encode(photo_like(20, 16, seed=index), "JPEG"))
    (tmp_path / "m.csv").write_text(
        "".join(f"TRAIN,{index}.jpg,{label}\n" for index, label in enumerate(labels))
    )
    return str(tmp_path / "m.csv")


def test_a_run_warns_in_the_console_summary_and_report_and_fails_with_strict_labels(
    tmp_path, capsys
):
    path = manifest(tmp_path, ["cat", "Cat", "cat", '"stripes, horizontal"', "cat|dog"])
    assert run.main(["--manifest", path, "--output_dir", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    # A label with a comma or a space is quoted, so that it reads as one.
    assert "Cat 1, cat 2, cat|dog 1, 'stripes, horizontal' 1\n" in printed
    warnings = [line for line in printed.splitlines() if line.startswith("warning: ")]
    assert [line.split(":")[1].strip().split(" ")[0] for line in warnings] == ["label", "labels"]
    assert warnings[0].endswith(f"1 row, the first {path}:5")
    assert warnings[1].endswith(f"3 rows, the first {path}:1, {path}:2, {path}:3")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [warning["kind"] for warning in summary["label_warnings"]] == ["separator", "variants"]
    page = Page(chromium(tmp_path, "--dump-dom", (tmp_path / "out" / "report.html").as_uri()))
    shown = {tuple(path): text for path, text in page.numbers if path[0] == "label_warnings"}
    assert shown == {
        ("label_warnings", index, field): str(warning[field])
        for index, warning in enumerate(summary["label_warnings"])
        for field in ("message", "rows")
    }

    code = run.main(
        ["--manifest", path, "--output_dir", str(tmp_path / "strict"), "--strict_labels"]
    )
    error = capsys.readouterr().err
    assert code == run.EXIT_FAILED and "error: --strict_labels: label 'cat|dog'" in error
    assert not (tmp_path / "strict" / "summary.json").exists()
