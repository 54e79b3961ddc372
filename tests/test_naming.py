"""The names a run writes come from core/naming.py, and a run id means one thing."""

import json
import re

from image_tfrecords.core import naming


def test_a_run_id_names_its_temp_folder_and_comes_back_from_it():
    run_id = naming.new_run_id()
    assert re.fullmatch(r"[0-9a-f]{12}", run_id) and run_id != naming.new_run_id()
    for output in ("/data/out", "/data/out/", "gs://bucket/out", "s3://b/o/"):
        folder = naming.temp_dir(output, run_id)
        assert folder.rstrip("/").endswith(f"/.tmp-{run_id}")
        assert naming.run_id_of(folder) == naming.run_id_of(folder + "/") == run_id
        assert naming.staged_dir(folder) == f"{folder}/staged"


def test_published_names():
    assert naming.published_shard("train", 3, 12, ".tfrecord.gz") == (
        "train-00003-of-00012.tfrecord.gz")
    assert naming.jsonl_list("gs://b/o/.tmp-1/staged", naming.ERRORS) == (
        "gs://b/o/.tmp-1/staged/errors-00000-of-00001.jsonl")


def test_summary_json_names_the_run_by_its_id(sample_outputs):
    summary = json.loads((sample_outputs("tfrecord") / naming.SUMMARY_FILE).read_text())
    assert re.fullmatch(r"[0-9a-f]{12}", summary["run_id"])
