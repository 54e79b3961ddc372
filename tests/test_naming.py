"""The names a run writes come from core/records/naming.py, and a run id means one thing."""

import fnmatch
import json
import re

import tensorflow_transform as tft

from image_tfrecords.core.records import naming


def test_a_run_id_names_its_temp_folder_and_comes_back_from_it():
    run_id = naming.new_run_id()
    assert re.fullmatch(r"[0-9a-f]{12}", run_id) and run_id != naming.new_run_id()
    for output in ("/data/out", "/data/out/", "gs://bucket/out", "s3://b/o/"):
        folder = naming.temp_dir(output, run_id)
        assert folder.rstrip("/").endswith(f"/.tmp-{run_id}")
        assert naming.run_id_of(folder) == naming.run_id_of(folder + "/") == run_id
        assert naming.staged_dir(folder) == f"{folder}/staged"


def test_published_names():
    shard = naming.PublishedShard("train", 3, 12, ".tfrecord.gz")
    assert shard.name == "train-00003-of-00012.tfrecord.gz"
    assert fnmatch.fnmatch(shard.name, naming.PublishedShard.glob("train", ".tfrecord"))
    assert not fnmatch.fnmatch(shard.name, naming.PublishedShard.glob("test", ".tfrecord"))
    assert naming.jsonl_list("gs://b/o/.tmp-1/staged", naming.ERRORS) == (
        "gs://b/o/.tmp-1/staged/errors-00000-of-00001.jsonl"
    )


def test_summary_json_names_the_run_by_its_id(sample_outputs):
    summary = json.loads((sample_outputs("tfrecord") / naming.SUMMARY_FILE).read_text())
    assert re.fullmatch(r"[0-9a-f]{12}", summary["run_id"])


def test_each_template_parses_the_names_it_builds_and_no_other():
    for shard in (
        naming.PublishedShard("train", 0, 1, ".tfrecord"),
        naming.PublishedShard("near_duplicates", 0, 1, ".jsonl"),
        naming.PublishedShard("validation", 123456, 123457, ".array_record"),
    ):
        assert naming.PublishedShard.parse(shard.name) == shard
    for name in ("train-00000.tfrecord", "train-0-of-1.tfrecord", "summary.json"):
        assert naming.PublishedShard.parse(name) is None
    for piece in (naming.ShardPiece("test", 3), naming.ShardPiece("train", 100000, 12)):
        assert naming.ShardPiece.parse(piece.stem) == piece
        assert naming.receipted(naming.receipt_path("gs://b/o/.tmp-1", *piece)) == piece
    assert naming.receipted("/o/.tmp-1/receipts/train-00003.json") is None
    assert naming.every_receipt("/o/.tmp-1") == "/o/.tmp-1/receipts/*.receipt.json"


def test_the_transform_folders_are_tf_transforms_own():
    assert naming.TRANSFORM_FN_DIR == tft.TFTransformOutput.TRANSFORM_FN_DIR
    assert naming.TRANSFORMED_METADATA_DIR == tft.TFTransformOutput.TRANSFORMED_METADATA_DIR
    assert naming.vocabulary("/o/transform_fn", "label") == "/o/transform_fn/assets/label"
    assert naming.PUBLISHED_LABEL_VOCABULARY == "transform_fn/assets/label"
