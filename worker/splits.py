"""Split names as users write them, in one place for the pipeline and the readers.

Pure Python (no Beam, no TensorFlow): image_tfrecords' readers import it too, and they
start without Beam.
"""

from __future__ import annotations

SPLITS = ("train", "validation", "test")
# What datasets call their validation split besides "validation" (Kaggle's `val/`,
# TFDS's `valid`, `dev` in NLP-style layouts); compared lower-cased.
_VALIDATION_ALIASES = frozenset({"val", "valid", "eval", "dev"})
# How error messages name what is accepted.
SPLIT_NAMES = "train, validation, test (any case; val, valid, eval, dev for validation)"


def normalise_split(text: str) -> str | None:
    """"TRAIN", " Validation", "val", "Dev"... -> one of SPLITS; None for anything else
    (UNASSIGNED, DISCARD and empty included: each caller says what those mean)."""
    name = text.strip().lower()
    if name in SPLITS:
        return name
    return "validation" if name in _VALIDATION_ALIASES else None
