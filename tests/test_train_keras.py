"""examples/train_keras.py trains from the shards with Keras; a short run, as a user runs it."""

import subprocess
import sys
from pathlib import Path

from image_tfrecords.core.launcher.console import is_routine_native_line

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "train_keras.py"


def test_the_keras_example_fits_on_the_shards_and_reports_validation_accuracy(sample_output):
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), str(sample_output), "--epochs", "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "Epoch 2/2" in result.stdout
    assert (
        "validation accuracy" in result.stdout and "on 6 examples (chance 0.333)" in result.stdout
    )
    # None of TensorFlow's start-up lines, which Keras printed loading TensorFlow first.
    assert not [
        line
        for line in result.stderr.splitlines()
        if is_routine_native_line(line.encode())
        or "cuda" in line.lower()
        or "oneDNN" in line
        or line.startswith("I tensorflow/")
    ], result.stderr
    # Nor Keras's warnings: shuffle=True on a Dataset, "Your input ran out of data" at the
    # end of an epoch of unknown length.
    assert "UserWarning" not in result.stderr, result.stderr
