"""Text from data has limits (core/records/text_limits.py): a line, a label, a declared class
name, the labels of one row; beyond them the row is a dead letter holding a bounded
excerpt, read without holding the line whole, and the report's sample stays linear in a
row's labels. Labels are written a line each (the vocabulary file), so a label that
breaks lines is refused, and every reader of those files splits on "\\n" only."""

import json
import tracemalloc

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to
from conftest import convert, encode, photo_like, voc_annotation

from image_tfrecords.core.inputs.rows import ManifestError, RowRules
from image_tfrecords.core.inputs.sources import (
    class_declarations,
    find_manifests,
    read_chunk,
    read_manifest,
)
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records.chunks import LineCutter, ManifestSource, RowChunk
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.records import (
    ExampleContent,
    ExampleRef,
    ManifestRow,
    ShardExamples,
)
from image_tfrecords.core.records.text_limits import (
    EXCERPT_CHARS,
    LINE_BREAKS,
    MAX_KEPT_CHARS,
    MAX_LABEL_CHARS,
    MAX_LABELS_PER_ROW,
    MAX_LINE_BYTES,
)
from image_tfrecords.core.report.report_page import SAMPLE_PER_LABEL
from image_tfrecords.core.worker.label_ids import Vocabulary
from image_tfrecords.output import Output
from image_tfrecords.pipeline.cli import verify_main
from image_tfrecords.transforms import report_content
from image_tfrecords.transforms.duplicates import Duplicate
from image_tfrecords.transforms.vocabulary_file import (
    VocabularyError,
    output_labels,
    read_pinned_vocabulary,
)

MULTI = RowRules(label_mode="multi")
LONG_LINE = 20 * MAX_LINE_BYTES  # 20 MB: a copy of it would show in any memory cap below


def peak_bytes(work):
    """tracemalloc's peak while `work()` runs, and what it returned."""
    tracemalloc.start()
    try:
        result = work()
        return tracemalloc.get_traced_memory()[1], result
    finally:
        tracemalloc.stop()


def by_line(items):
    return {item.line: item for item in items}


def assert_bounded(letter):
    assert len(letter.raw) <= MAX_KEPT_CHARS and len(letter.message) <= MAX_KEPT_CHARS


def test_an_over_long_csv_line_is_a_dead_letter_read_without_holding_it(tmp_path):
    manifest = tmp_path / "m.csv"
    with manifest.open("w") as out:
        out.write("train,a.jpg,cat\n")
        out.write("train,b.jpg," + "x" * LONG_LINE + "\n")
        out.write("train,c.jpg,dog\n")
    peak, items = peak_bytes(lambda: by_line(read_manifest(str(manifest))))
    assert peak < 8 * MAX_LINE_BYTES  # a few bounded reads; the line whole is 20 MB
    assert [items[1].labels, items[3].labels] == [("cat",), ("dog",)]
    letter = items[2]
    assert isinstance(letter, DeadLetter) and letter.reason == reasons.TEXT_TOO_LONG
    assert letter.raw.startswith("train,b.jpg,xxx")
    assert letter.raw.endswith(f"... ({LONG_LINE + 12:,} bytes in all)")
    assert len(letter.raw) < EXCERPT_CHARS + 50


def test_a_line_range_holds_an_over_long_line_once(tmp_path):
    """A worker reads a planned range whole (its digest is checked first): the line is in
    memory once, as those bytes, and no copy of it more."""
    data = b"train,a.jpg,cat\ntrain,b.jpg," + b"x" * LONG_LINE + b"\ntrain,c.jpg,dog\n"
    (tmp_path / "m.csv").write_bytes(data)
    cutter = LineCutter(len(data))
    cutter.feed(data)
    (lines,) = cutter.ranges()
    chunk = RowChunk(ManifestSource(str(tmp_path / "m.csv"), "csv"), lines)
    peak, items = peak_bytes(lambda: by_line(read_chunk(chunk, RowRules())))
    assert peak < len(data) + 8 * MAX_LINE_BYTES
    assert items[2].reason == reasons.TEXT_TOO_LONG and items[3].labels == ("dog",)


def test_a_line_of_exactly_the_limit_is_read_and_one_byte_more_is_not(tmp_path):
    prefix = "train,a.jpg,"
    manifest = tmp_path / "m.csv"
    manifest.write_text(
        f"{prefix}{'y' * (MAX_LINE_BYTES - len(prefix))}\r\n"
        f"{prefix}{'z' * (MAX_LINE_BYTES + 1 - len(prefix))}\n"
        "train,c.jpg,dog\n"
    )
    items = by_line(read_manifest(str(manifest)))
    assert items[1].reason == reasons.MALFORMED_ROW  # a field over csv's own limit
    assert items[2].reason == reasons.TEXT_TOO_LONG
    assert f"({MAX_LINE_BYTES + 1:,} bytes in all)" in items[2].raw
    assert items[3].labels == ("dog",)


def test_an_over_long_json_lines_line_is_a_dead_letter(tmp_path):
    manifest = tmp_path / "m.jsonl"
    good = json.dumps({"imageGcsUri": "a.jpg", "classificationAnnotation": {"displayName": "cat"}})
    manifest.write_text(
        good
        + "\n"
        + json.dumps(
            {"imageGcsUri": "b.jpg", "classificationAnnotation": {"displayName": "x" * LONG_LINE}}
        )
        + "\n"
        + good.replace("a.jpg", "c.jpg")
        + "\n"
    )
    items = by_line(read_manifest(str(manifest)))
    assert items[2].reason == reasons.TEXT_TOO_LONG and items[3].labels == ("cat",)
    assert_bounded(items[2])


def test_a_label_over_the_limit_is_a_dead_letter_holding_an_excerpt(tmp_path):
    manifest = tmp_path / "m.csv"
    manifest.write_text(
        f"train,a.jpg,{'l' * MAX_LABEL_CHARS}\ntrain,b.jpg,{'l' * (MAX_LABEL_CHARS + 1)}\n"
    )
    items = by_line(read_manifest(str(manifest)))
    assert isinstance(items[1], ManifestRow)
    assert items[2].reason == reasons.TEXT_TOO_LONG
    assert f"a label of {MAX_LABEL_CHARS + 1:,} characters" in items[2].message
    assert len(items[2].message) < EXCERPT_CHARS + 200


def test_a_row_with_too_many_labels_is_a_dead_letter(tmp_path):
    manifest = tmp_path / "m.csv"
    manifest.write_text(
        "".join(
            f"train,{name}.jpg,{'|'.join(f'label{i}' for i in range(count))}\n"
            for name, count in (("a", MAX_LABELS_PER_ROW), ("b", MAX_LABELS_PER_ROW + 1))
        )
    )
    items = by_line(read_manifest(str(manifest), MULTI))
    assert len(items[1].labels) == MAX_LABELS_PER_ROW
    assert items[2].reason == reasons.TOO_MANY_LABELS
    assert f"{MAX_LABELS_PER_ROW + 1:,} labels in one row" in items[2].message


def test_the_report_sample_of_a_row_with_many_labels_stays_linear():
    """An example with N labels is a sample candidate N times, each a Beam element of its
    own: were each to carry the N labels, the sample would hold N² (2,000 labels: 117 MB;
    10,000: over 9 GB)."""
    labels = tuple(f"label-{number:05d}" for number in range(2_000))
    ref = ExampleRef("train", 0, 0, "m.csv", 1, "/a.jpg", labels, 0, None)

    def sample():
        with beam.Pipeline() as pipeline:
            samples = (
                pipeline
                | beam.Create([ShardExamples("train", 0, (("sha", ref),))])
                | beam.FlatMap(report_content._shard_sample)
                | beam.combiners.Top.PerKey(
                    SAMPLE_PER_LABEL, reverse=True, key=report_content._sample_rank
                )
            )
            assert_that(samples | beam.combiners.Count.Globally(), equal_to([len(labels)]))

    peak, _ = peak_bytes(sample)
    assert peak < 40_000_000


def test_the_copies_the_report_holds_keep_no_rows_and_each_label_once():
    """The report holds up to LEAKS_LISTED copies of each kind: were each to carry what
    --dedupe keeps of its example (a detection image's rows, one per object) and a label
    per object, 10,000 copies of 1,000-object images would hold gigabytes."""
    rows = tuple(ManifestRow("m.csv", 1, "r", "train", "/a.jpg", ("cat",)) for _ in range(1_000))
    content = ExampleContent(rows, 1_000, None, 64)
    ref = ExampleRef("train", 0, 0, "m.csv", 1, "/a.jpg", ("cat", "dog") * 500, 0, content)
    shown = report_content._shown_copy(Duplicate("sha", ref, ref._replace(split="test")))
    assert shown.kept.labels == shown.copy.labels == ("cat", "dog")
    assert shown.kept.content is shown.copy.content is None and shown.distance == 0


def test_every_dead_letter_keeps_bounded_text():
    letter = DeadLetter(
        "m.csv",
        1,
        "r" * (MAX_KEPT_CHARS + 1),
        "",
        "",
        reasons.MALFORMED_ROW,
        "m" * (MAX_KEPT_CHARS + 1),
    )
    assert_bounded(letter)
    assert letter.raw.endswith(f"({MAX_KEPT_CHARS + 1:,} characters in all)")
    kept = "r" * MAX_KEPT_CHARS
    assert DeadLetter("m.csv", 1, kept, "", "", reasons.MALFORMED_ROW, "").raw == kept


@pytest.mark.parametrize("breaking", sorted(set(LINE_BREAKS) - {"\n", "\r"}))
def test_a_label_that_breaks_lines_is_a_dead_letter_naming_the_character(tmp_path, breaking):
    """Each character str.splitlines splits on; in a CSV row (\\n and \\r end the row)."""
    manifest = tmp_path / "m.csv"
    manifest.write_text(f"train,a.jpg,cat\ntrain,b.jpg,a{breaking}b\n", newline="")
    items = by_line(read_manifest(str(manifest)))
    assert items[2].reason == reasons.LABEL_BREAKS_LINES
    assert f"U+{ord(breaking):04X}" in items[2].message


def test_a_json_label_holding_a_newline_is_a_dead_letter(tmp_path):
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(
        json.dumps({"imageGcsUri": "a.jpg", "classificationAnnotation": {"displayName": "a\nb"}})
        + "\n"
    )
    (letter,) = read_manifest(str(manifest))
    assert letter.reason == reasons.LABEL_BREAKS_LINES
    assert "U+000A LINE FEED" in letter.message


@pytest.mark.parametrize("name", ["n" * (MAX_LABEL_CHARS + 1), "a\u2028b"])
def test_a_declared_class_name_no_label_can_be_is_refused_naming_the_file(tmp_path, name):
    yaml = tmp_path / "data.yaml"
    (tmp_path / "images" / "train").mkdir(parents=True)
    yaml.write_text(json.dumps({"path": ".", "train": "images/train", "names": ["cat", name]}))
    with pytest.raises(ManifestError, match=f"{yaml}.*(over the limit|U\\+2028)"):
        class_declarations(find_manifests([str(yaml)]))


def test_a_voc_class_list_is_split_on_newline_only_and_its_line_breaking_name_refused(tmp_path):
    """labelmap.txt was split by str.splitlines: `cat<U+2028>dog` declared two classes."""
    (tmp_path / "Annotations").mkdir()
    (tmp_path / "Annotations" / "a.xml").write_text(
        voc_annotation("a.jpg", (64, 48), [("cat", (2, 2, 30, 30), 0, 0)])
    )
    (tmp_path / "labelmap.txt").write_text(
        "background:0,0,0::\ncat\u2028dog:1,1,1::\n", encoding="utf-8"
    )
    with pytest.raises(ManifestError, match="labelmap.txt.*U\\+2028 LINE SEPARATOR"):
        class_declarations(find_manifests([str(tmp_path)]))


def test_the_vocabulary_readers_split_on_newline_only(tmp_path):
    """An asset as tf.Transform writes it (a value a line: it leaves out only values
    holding \\n or \\r): the ids the pipeline looked up (label_ids), what verify and
    load() read (Output.vocabulary) and output_labels are the same; --vocabulary refuses
    the label that breaks lines rather than pinning other ids."""
    assets = tmp_path / "out" / "transform_fn" / "assets"
    assets.mkdir(parents=True)
    values = ["cat", "a\u2028b", "c\x85d", "dog"]
    (assets / "label").write_bytes("".join(f"{value}\n" for value in values).encode())
    looked_up = Vocabulary.from_asset((assets / "label").read_bytes(), False).ids
    assert [value.decode() for value in looked_up] == values
    assert Output(str(tmp_path / "out"), summary=None).vocabulary == values  # no summary read
    assert list(output_labels(str(tmp_path / "out"))) == values
    with pytest.raises(VocabularyError, match="line 2: 'a\\\\u2028b' holds U\\+2028"):
        read_pinned_vocabulary(str(tmp_path / "out"))


def test_a_label_that_breaks_lines_is_a_dead_letter_and_verify_and_vocabulary_agree(tmp_path):
    """The whole job (today's wrote the label, and verify then failed on the output): the
    row with U+2028 is dead-lettered, verify passes, and --vocabulary OUTPUT_DIR pins the
    ids verify and load() read."""
    for seed, name in enumerate("ab"):
        (tmp_path / f"{name}.jpg").write_bytes(encode(photo_like(32, 24, seed), "JPEG"))
    (tmp_path / "m.csv").write_text("train,a.jpg,cat\ntrain,b.jpg,x\u2028y\n", encoding="utf-8")
    output = convert(
        tmp_path / "out", "--manifest", str(tmp_path / "m.csv"), "--max_error_fraction", "0.5"
    )
    (letter,) = [
        json.loads(line)
        for errors in output.glob("errors-*.jsonl")
        for line in errors.read_text(encoding="utf-8").split("\n")
        if line
    ]
    assert letter["reason"] == reasons.LABEL_BREAKS_LINES and letter["line"] == 2
    assert verify_main([str(output)]) == 0
    pinned = read_pinned_vocabulary(str(output)).labels
    assert pinned == tuple(Output.read(str(output)).vocabulary) == ("cat",)
