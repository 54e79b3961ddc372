"""Label ids by a lookup of the transform_fn's vocabulary assets, without TensorFlow.

tf.Transform computes each vocabulary on TRAIN (or takes the pinned one) and saves it in
the transform_fn as a text asset, `transform_fn/assets/<name>`, one value per line; the
transform_fn's lookup table gives a value the number of its line (TensorFlow's
TextFileInitializer), and an unseen value the OOV bucket's id (the vocabulary's length)
or -1. Reading the asset and looking each value up in a dict gives the same ids, without
a TensorFlow graph run per batch of rows or the rows' round trip through Arrow:
tests/test_label_ids.py proves it against the saved transform_fn, for every label mode,
pinned or computed, with and without the OOV bucket, for seen and unseen values.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records import naming
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.records import LabelledRow, ManifestRow
from image_tfrecords.core.storage import storage

UNSEEN_ID = -1  # what the transform gives an unseen value without an OOV bucket


class Vocabulary(NamedTuple):
    """One vocabulary asset: its values' ids, and whether unseen values get an OOV id."""

    ids: dict[bytes, int]
    oov_bucket: bool

    @classmethod
    def from_asset(cls, data: bytes, oov_bucket: bool) -> Vocabulary:
        """The asset's bytes, a value per line. tf.Transform leaves values holding a
        "\n" or "\r" out of a vocabulary (tests/test_label_ids.py holds one): they are
        unseen, there and here."""
        lines = data.split(b"\n")
        if lines and not lines[-1]:
            lines.pop()  # the last line's end
        return cls({line: number for number, line in enumerate(lines)}, oov_bucket)

    def id_of(self, value: str) -> int:
        """The value's id; an unseen value's is len(ids) with the OOV bucket, else
        UNSEEN_ID."""
        found = self.ids.get(value.encode())
        if found is not None:
            return found
        return len(self.ids) if self.oov_bucket else UNSEEN_ID


@dataclasses.dataclass(frozen=True)
class LabelLookup:
    """Gives rows their label and category ids from the vocabulary assets of the
    transform_fn at `transform_fn_dir` (read once per process), or a dead letter for a
    row with an unseen value.

    `vocabularies`: the asset names, the label's first, then one per categorical extra
    column, whose places in ManifestRow.extras are `categorical`; `unseen_where` ends the
    message of an unseen label ("does not occur in the TRAIN split").
    """

    transform_fn_dir: str
    vocabularies: tuple[str, ...]
    categorical: tuple[tuple[str, int], ...]  # (column name, place in extras)
    oov_bucket: bool
    unseen_where: str

    def labelled(self, row: ManifestRow) -> LabelledRow | DeadLetter:
        labels, *categories = _vocabularies(
            self.transform_fn_dir, self.vocabularies, self.oov_bucket
        )
        label_ids = tuple(map(labels.id_of, row.labels))
        category_ids = tuple(
            vocabulary.id_of(str(row.extras[index]))
            for vocabulary, (_, index) in zip(categories, self.categorical)
        )
        if UNSEEN_ID in label_ids:
            unseen = [
                label for label, label_id in zip(row.labels, label_ids) if label_id == UNSEEN_ID
            ]
            return row.dead_letter(
                reasons.UNSEEN_LABEL, f"label {', '.join(map(repr, unseen))} {self.unseen_where}"
            )
        if UNSEEN_ID in category_ids:
            unseen = [
                f"{name} {row.extras[index]!r}"
                for (name, index), category in zip(self.categorical, category_ids)
                if category == UNSEEN_ID
            ]
            return row.dead_letter(
                reasons.UNSEEN_CATEGORY, f"{', '.join(unseen)} does not occur in the TRAIN split"
            )
        return LabelledRow(row, label_ids, category_ids)


@functools.lru_cache(maxsize=4)
def _vocabularies(
    transform_fn_dir: str, names: tuple[str, ...], oov_bucket: bool
) -> tuple[Vocabulary, ...]:
    """The assets `names` of the SavedModel at `transform_fn_dir`."""
    found = []
    for name in names:
        with storage.open_read(naming.vocabulary(transform_fn_dir, name)) as file:
            found.append(Vocabulary.from_asset(file.read(), oov_bucket))
    return tuple(found)
