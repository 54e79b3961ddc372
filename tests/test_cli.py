"""The installed entry points, run as a user runs them."""

import json
import os
import subprocess
import sys

from conftest import tiny_manifest


def run_command(*args, cwd=None):
    return subprocess.run(args, capture_output=True, text=True, cwd=cwd, timeout=300)


def test_convert_help_lists_this_jobs_options_and_every_beam_option():
    result = run_command(sys.executable, "-m", "pipeline", "--help")
    assert result.returncode == 0
    for flag in ("--manifest", "--output_dir", "--unseen_label", "--target_shard_mb",
                 "--runner", "--direct_num_workers", "--project", "--flink_master"):
        assert f"  {flag}" in result.stdout, flag
    assert result.stdout.index("--manifest") < result.stdout.index("--runner")


def test_image_tfrecords_without_a_command_prints_usage_and_fails():
    result = run_command(os.path.join(os.path.dirname(sys.executable), "image-tfrecords"))
    assert result.returncode == 2 and "convert" in result.stdout
    result = run_command(os.path.join(os.path.dirname(sys.executable), "image-tfrecords"),
                         "frobnicate")
    assert result.returncode == 2 and "unknown command 'frobnicate'" in result.stderr


def test_python_dash_m_pipeline_converts_and_prints_the_table(tmp_path):
    tiny_manifest(tmp_path)
    result = run_command(sys.executable, "-m", "pipeline", "--manifest", "m.csv",
                         "--output_dir", "out", "--runner", "DirectRunner",
                         "--direct_num_workers", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "rows read 3 = 3 examples written + 0 dead-lettered" in result.stdout
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["options"]["runner"] == "DirectRunner"
    assert summary["splits"]["train"]["examples"] == 2
