"""Names read back from an output folder stay in it: summary.json's shards, companions and
lists of JSON lines that leave the folder (`..`, an absolute path) or are a URL are refused
by `verify`, `report`, `inspect` and `load()`, naming summary.json and the entry, before
any of them is read (the output may be a bucket others can write to). The receipts' side
is in test_receipts.py.
"""

import json
import shutil

import pytest
from conftest import copy_output

import image_tfrecords
from image_tfrecords.core.records.naming import UnconfinedName, confined_name
from image_tfrecords.pipeline.cli import inspect_main, report_main, verify_main

# Where an entry of summary.json is, the name put there, and how the error names the entry.
SHARD = ("splits", "train", "shards", 0, "file")
CRAFTED = {
    "shard ..": (SHARD, "../elsewhere/train.tfrecord", "splits.train.shards.0.file"),
    "shard absolute": (SHARD, "/ELSEWHERE/train.tfrecord", "splits.train.shards.0.file"),
    "shard URL": (SHARD, "http://127.0.0.1:9/t.tfrecord", "splits.train.shards.0.file"),
    "companion": (
        ("splits", "train", "shards", 0, "companions", 0),
        "../elsewhere/t.idx",
        "splits.train.shards.0.companions.0",
    ),
    "dead letters": (("errors", "files", 0), "../elsewhere/errors.jsonl", "errors.files.0"),
    "split": (("splits", "../elsewhere"), {}, "splits.`../elsewhere`"),
}
READERS = {
    "verify": lambda output, tmp_path: verify_main([str(output)]),
    "report": lambda output, tmp_path: report_main([str(output)]),
    "inspect": lambda output, tmp_path: inspect_main(
        [str(output), "--out", str(tmp_path / "look")]
    ),
}


@pytest.fixture(scope="module")
def output_with_elsewhere(sample_outputs, tmp_path_factory):
    """A copy of the sample output, and beside it a folder `elsewhere` holding what its
    crafted names point at: the output's own files, which a reader would take."""
    root = tmp_path_factory.mktemp("confined")
    output = copy_output(sample_outputs("tfrecord"), root / "out")
    (root / "elsewhere").mkdir()
    shutil.copy(next(output.glob("train-*.tfrecord")), root / "elsewhere" / "train.tfrecord")
    shutil.copy(next(output.glob("errors-*.jsonl")), root / "elsewhere" / "errors.jsonl")
    return output


def crafted(output, place, name) -> None:
    """Puts `name` at `place` in summary.json."""
    summary = json.loads((output / "summary.json").read_text())
    holder = summary
    for key in place[:-1]:
        holder = holder[key]
    holder[place[-1]] = name
    (output / "summary.json").write_text(json.dumps(summary))


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("case", CRAFTED)
def test_a_name_leaving_the_output_is_refused_naming_summary_json_and_the_entry(
    output_with_elsewhere, tmp_path, capsys, reader, case
):
    output = output_with_elsewhere
    place, name, entry = CRAFTED[case]
    original = (output / "summary.json").read_text()
    try:
        crafted(output, place, name)
        assert READERS[reader](output, tmp_path) != 0
    finally:
        (output / "summary.json").write_text(original)
    error = capsys.readouterr().err
    assert f"{output}/summary.json" in error and entry in error, error
    assert not (tmp_path / "look").exists()


@pytest.mark.parametrize("reader", READERS)
def test_a_shard_that_links_out_of_the_output_is_refused_unread(
    output_with_elsewhere, tmp_path, capsys, reader
):
    """A plain name whose file is a link to one elsewhere (issue 55): confinement applies
    where links lead, as for every input."""
    output = output_with_elsewhere
    shard = next(output.glob("train-*.tfrecord"))
    kept = tmp_path / "kept.tfrecord"
    shutil.move(shard, kept)
    try:
        shard.symlink_to(output.parent / "elsewhere" / "train.tfrecord")
        assert READERS[reader](output, tmp_path) != 0
    finally:
        shard.unlink(missing_ok=True)
        shutil.move(kept, shard)
    error = capsys.readouterr().err
    assert f"{shard} is a link out of {output}: it is not read" in error, error
    assert not (tmp_path / "look").exists()


def test_load_refuses_a_shard_outside_the_output(output_with_elsewhere):
    output = output_with_elsewhere
    original = (output / "summary.json").read_text()
    try:
        crafted(output, SHARD, "../elsewhere/train.tfrecord")
        with pytest.raises(
            ValueError,
            match=r"summary.json(.|\n)*splits.train.shards.0.file"
            r"(.|\n)*'\.\./elsewhere/train.tfrecord'",
        ):
            image_tfrecords.load(str(output))
    finally:
        (output / "summary.json").write_text(original)


@pytest.mark.parametrize(
    "name",
    [
        "..",
        "a/../..",
        "/etc/passwd",
        "gs://bucket/x",
        "http:x",
        "C:\\x",
        "a\\..\\..\\x",
        "a//b",
        "./a",
        "",
        "a/\n",
    ],
)
def test_the_one_rule_refuses_every_name_that_is_not_plainly_in_the_folder(name):
    with pytest.raises(UnconfinedName, match="is not a name in the folder|leaves the folder"):
        confined_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "train-00000-of-00002.tfrecord",
        "transform_fn/assets/label",
        "errors-00000-of-00001.jsonl",
        "transform_fn/assets/a:b",
        "é x.txt",
    ],
)
def test_the_names_an_output_holds_pass(name):
    assert confined_name(name) == name
