"""summary.json through its one typed model: what a run writes reads back whole, an older
output reads with the defaults of what it lacks, and a file that is no summary is refused
naming the field."""

import json

import pytest

from image_tfrecords import Output
from image_tfrecords.core.records.choices import LabelMode, UnseenLabel
from image_tfrecords.core.records.summary import NearCopiesInfo, Summary


def test_a_written_summary_reads_back_equal_and_writes_the_same_json(sample_output):
    text = (sample_output / "summary.json").read_text()
    summary = Summary.from_json(text)
    assert json.loads(summary.to_json()) == json.loads(text)
    assert Summary.from_json(summary.to_json()) == summary
    # The choices readers act on are typed; the other options are kept as given.
    assert summary.options.label_mode is LabelMode.SINGLE
    assert summary.options.unseen_label is UnseenLabel.ERROR
    assert summary.options.shard_format.suffix in (".tfrecord", ".array_record")
    assert summary.options.model_extra["max_error_fraction"] == 0.25
    assert summary.rows_read == 50 and summary.examples == {
        split: info.examples for split, info in summary.splits.items()
    }
    assert sum(summary.examples.values()) == summary.examples_written == 43


def test_an_older_output_reads_with_the_defaults_of_what_it_lacks(sample_output):
    """Written before --file_format, the histograms and the copy counts existed."""
    old = json.loads((sample_output / "summary.json").read_text())
    del old["options"]["file_format"], old["duplicates"], old["near_duplicates"]
    for split in old["splits"].values():
        del split["longest_side"], split["file_bytes"]
    summary = Summary.model_validate(old)
    assert summary.options.file_format == "tfrecord"
    assert summary.near_duplicates == NearCopiesInfo() and summary.near_duplicates.copies == 0
    assert summary.splits["train"].longest_side == {} and summary.splits["train"].examples


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda s: s.pop("rows_read"), "rows_read"),
        (lambda s: s["splits"]["train"].update(examples="many"), "splits.train.examples"),
        (lambda s: s["options"].update(label_mode="boxes"), "options.label_mode"),
        (
            lambda s: s["features"]["image/encoded"].update(dtype="string"),
            "features.image/encoded.dtype",
        ),
    ],
)
def test_a_summary_that_is_not_one_is_refused_naming_the_field(
    sample_output, tmp_path, change, named
):
    broken = json.loads((sample_output / "summary.json").read_text())
    change(broken)
    (tmp_path / "summary.json").write_text(json.dumps(broken))
    with pytest.raises(
        ValueError,
        match=r"summary.json is not a summary\.json image-tfrecords "
        rf"reads: .*\n{named}\n",
    ):
        Output.read(str(tmp_path))
