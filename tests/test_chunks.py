"""Rows in chunks: a manifest cut into line ranges reads as the whole file does, and what
pass 1 learns of its chunks is what it learns of all its rows."""

import codecs
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from image_tfrecords.core.inputs.rows import ManifestError, RowRules
from image_tfrecords.core.inputs.sources import find_manifests, read_chunk, read_source
from image_tfrecords.core.records.chunks import LineCutter, RowChunk, range_digest
from image_tfrecords.core.worker.row_tasks import sample_of, survey

LINE = st.sampled_from(
    [
        b"",
        b"\r",
        b"train,a.jpg,cat",
        b"TEST,b c.jpg,dog\r",
        b"\xc3\xa9t\xc3\xa9",
        b'x,"y',
        b"validation,d.jpg,cat,extra",
        b"  ",
        b"a" * 300,
    ]
)


def cut(data: bytes, target: int, block: int):
    cutter = LineCutter(target)
    for start in range(0, len(data), block):
        cutter.feed(data[start : start + block])
    return cutter.ranges()


@settings(max_examples=300, deadline=None)
@given(st.lists(LINE, max_size=40), st.booleans(), st.integers(1, 400), st.integers(1, 97))
def test_line_ranges_cover_the_file_in_whole_lines_numbered_from_its_start(
    lines, last_line_ends, target, block
):
    data = b"\n".join(lines) + (b"\n" if last_line_ends and lines else b"")
    ranges = cut(data, target, block)
    assert ranges[0].start == 0 and ranges[-1].end == len(data)
    for before, after in itertools.pairwise(ranges):
        assert before.end == after.start and data[before.end - 1 : before.end] == b"\n"
        assert before.end - before.start >= target  # none cut short but the last
    for each in ranges:
        assert each.first_line == data.count(b"\n", 0, each.start) + 1
        assert each.digest == range_digest(data[each.start : each.end])


MANIFESTS = {
    "header.csv": codecs.BOM_UTF8
    + b"image_uri,label,split\r\n\n"
    + b"".join(
        b"img/%d.jpg,%s,%s\r\n" % (i, b"cat" if i % 3 else b"dog", b"test" if i % 4 else b"TRAIN")
        for i in range(30)
    )
    + b'bad,"row\nimg/x.jpg\n,,\n\xff,cat\nDISCARD,img/y.jpg,cat\n',
    "automl.csv": b'x,"broken\ntrain,a.jpg,cat\n'
    + b"".join(b"UNASSIGNED,img/%d.png,bird\n" % i for i in range(25))
    + b"train,z.jpg",
    "vertex.jsonl": b"".join(
        b'{"imageGcsUri": "gs://b/%d.jpg", "classificationAnnotation": {"displayName": "c%d"}}\n'
        % (i, i % 2)
        for i in range(20)
    )
    + b"{not json\n\n",
}


def chunks_of(path: str, target: int) -> list[RowChunk]:
    (source,) = find_manifests([path])
    with open(path, "rb") as file:
        return [RowChunk(source, lines) for lines in cut(file.read(), target, 1 << 20)]


def test_a_manifest_read_in_chunks_gives_the_rows_and_dead_letters_of_the_whole(tmp_path):
    for name, data in MANIFESTS.items():
        path = tmp_path / name
        path.write_bytes(data)
        (source,) = find_manifests([str(path)])
        whole = list(read_source(source, RowRules()))
        assert len(whole) > 20
        for target in (1, 40, 200, len(data)):
            chunks = chunks_of(str(path), target)
            assert len(chunks) > 1 or target == len(data)
            assert [item for chunk in chunks for item in read_chunk(chunk, RowRules())] == whole, (
                name,
                target,
            )


def test_the_surveys_of_the_chunks_add_up_to_the_survey_of_the_whole(tmp_path):
    path = tmp_path / "header.csv"
    path.write_bytes(MANIFESTS["header.csv"])
    (source,) = find_manifests([str(path)])
    whole = survey(read_source(source, RowRules()), sample_size=4)
    parts = [
        survey(read_chunk(chunk, RowRules()), sample_size=4) for chunk in chunks_of(str(path), 60)
    ]
    assert sum(part.rows_read for part in parts) == whole.rows_read == 35
    assert {
        split: sum(part.rows.get(split, 0) for part in parts) for split in whole.rows
    } == whole.rows
    assert sorted(d.line for part in parts for d in part.dead_letters) == sorted(
        d.line for d in whole.dead_letters
    )
    # The sample of the chunks' samples is the whole's (the URIs of least digest).
    for split, sample in whole.size_sample.items():
        assert (
            sample_of([uri for part in parts for uri in part.size_sample.get(split, [])], 4)
            == sample
        )
    train = {}
    for part in parts:
        for group in part.train_labels:
            train[group.labels] = train.get(group.labels, 0) + group.rows
    assert train == {group.labels: group.rows for group in whole.train_labels}


@pytest.mark.parametrize(
    "change",
    [
        lambda data: data.replace(b"img/7.jpg", b"img/77.jpg"),  # a row rewritten: lines move
        lambda data: data.replace(b"img/7.jpg", b"img/8.jpg"),  # same length, other bytes
    ],
)
def test_a_manifest_that_changes_after_the_plan_fails_its_chunk_naming_the_file(change, tmp_path):
    path = tmp_path / "header.csv"
    path.write_bytes(MANIFESTS["header.csv"])
    chunks = chunks_of(str(path), 200)
    assert len(chunks) > 2
    path.write_bytes(change(path.read_bytes()))
    failed = 0
    for chunk in chunks:
        try:
            list(read_chunk(chunk, RowRules()))
        except ManifestError as error:
            assert str(path) in str(error) and "changed while the run read it" in str(error)
            failed += 1
    assert failed  # the chunks the change touched, and with a shift every later one
