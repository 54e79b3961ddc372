"""Split names as users write them, in one place for the pipeline and the readers: a CSV's
split column, `--manifest SPLIT=PATH`, an image folder's split folders and a Hugging Face
imagefolder's split folders all go through normalise_split.

The names are the ones datasets are published with: TFDS's and the datasets library's
own `train`, `validation` and `test`; the datasets library's other split keywords
(datasets/data_files.py SPLIT_KEYWORDS: `training`, `valid`, `dev`, `val`, `testing`);
Roboflow's `valid/`; Kaggle's `training_set/` and `test_set/`, and the `trainset`,
`devset` of NLP-style layouts. `eval` is validation here, as in TensorFlow's Object
Detection API and TFRecorder (the datasets library counts `eval` and `evaluation` as
test: a folder named so is read as validation, and the console says so).

Pure Python (no Beam, no TensorFlow): image_tfrecords' readers import it too, and they
start without Beam.
"""

from __future__ import annotations

import re

SPLITS = ("train", "validation", "test")
# The words that name each split besides its own name; compared lower-cased.
_ALIASES = {
    "train": ("training",),
    "validation": ("val", "valid", "eval", "dev"),
    "test": ("testing",),
}
_SPLIT_OF_WORD = {word: split for split in SPLITS for word in (split, *_ALIASES[split])}
# "training_set", "test-set", "devset": a split word with `set` after it names that split.
_SET_SUFFIX = re.compile(r"[-_ ]?set$")
# How error messages name what is accepted.
SPLIT_NAMES = ("train, validation, test (any case; training for train; val, valid, eval, dev "
               "for validation; testing for test; each also with _set after it, as "
               "training_set)")


def normalise_split(text: str) -> str | None:
    """"TRAIN", " Validation", "val", "Dev", "training_set"... -> one of SPLITS; None for
    anything else (UNASSIGNED, DISCARD and empty included: each caller says what those
    mean)."""
    name = text.strip().lower()
    return _SPLIT_OF_WORD.get(name) or _SPLIT_OF_WORD.get(_SET_SUFFIX.sub("", name))
