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

from typing import NamedTuple

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
