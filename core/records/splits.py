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

A split column may also be a validation flag, as fastai's ColSplitter reads one (its
default column `is_valid`, common in Kaggle CSVs): in a column named `is_valid`, `is_val`
or `valid`, true (or 1) is validation and false (or 0) train (split_word).

Pure Python (no Beam, no TensorFlow): image_tfrecords' readers import it too, and they
start without Beam.
"""

from __future__ import annotations

import re
from typing import Literal, get_args

# The one definition of the splits: the type of a split name in the typed records
# (shard receipts, summary.json), and their order.
Split = Literal["train", "validation", "test"]
SPLITS: tuple[str, ...] = get_args(Split)
# The words that name each split besides its own name; compared lower-cased.
_ALIASES = {
    "train": ("training",),
    "validation": ("val", "valid", "eval", "dev"),
    "test": ("testing",),
}
_SPLIT_OF_WORD = {word: split for split in SPLITS for word in (split, *_ALIASES[split])}
# "training_set", "test-set", "devset": a split word with `set` after it names that split.
_SET_SUFFIX = re.compile(r"[-_ ]?set$")
# Columns that flag the validation rows (fastai's ColSplitter: `is_valid`), and what
# their values say; compared lower-cased.
VALIDATION_FLAG_COLUMNS = ("is_valid", "is_val", "valid")
_FLAG_SPLITS = {"true": "validation", "1": "validation", "false": "train", "0": "train"}
# How error messages name what is accepted.
SPLIT_NAMES = (
    "train, validation, test (any case; training for train; val, valid, eval, dev "
    "for validation; testing for test; each also with _set after it, as "
    "training_set)"
)


def normalise_split(text: str) -> str | None:
    """ "TRAIN", " Validation", "val", "Dev", "training_set"... -> one of SPLITS; None for
    anything else (UNASSIGNED, DISCARD and empty included: each caller says what those
    mean)."""
    name = text.strip().lower()
    return _SPLIT_OF_WORD.get(name) or _SPLIT_OF_WORD.get(_SET_SUFFIX.sub("", name))


def is_validation_flag_column(name: str) -> bool:
    return name.strip().lower() in VALIDATION_FLAG_COLUMNS


def split_word(value: str, flag_column: bool) -> str:
    """A split column's value as a split word: in a validation flag column, true/1 is
    "validation" and false/0 "train"; any other value as written (a flag column may hold
    split names too)."""
    return _FLAG_SPLITS.get(value.strip().lower(), value) if flag_column else value
