"""The folder an annotation file's paths stay in: one rule for every annotation format.

An annotation file comes from strangers (a public download, a vendor's export, a shared
bucket), so the image and label paths it names are resolved inside its dataset's root:
--image_dir where given, else the folder the format keeps its files in (the annotation
file's own, a VOCdevkit's root, data.yaml's folder). A path that leaves the root is not
read: `..` above it, an absolute path elsewhere, another bucket or a URL, or on local
disk a link whose target is elsewhere (a link to ~/.ssh/id_rsa named `x.jpg`). Bucket
paths (gs://, s3://...) are compared as their normalised text: a bucket has no links.
Such a row is a path_outside_dataset dead letter naming the row and the path; a file the
whole dataset hangs on (YOLO's root, a split's list of images) is a usage error naming the
file and the option. --allow_paths_outside_dataset (RowRules) reads them all, for
datasets that really point elsewhere.

CSV manifests and Vertex AI's JSON Lines are lists of URIs their user wrote: their
absolute paths and URLs are read as written (docs/guides/csv-manifests.md), not here.
"""

from __future__ import annotations

import dataclasses
import functools
import os

from image_tfrecords.core.inputs.rows import RowRules, normalise_path, resolve_uri
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.storage import storage

OPTION = "--allow_paths_outside_dataset"
# How much of a path read from data a message quotes: enough to recognise it, never a
# whole hostile field (a file_name of megabytes, a split list's line).
QUOTED_CHARACTERS = 200


@dataclasses.dataclass(frozen=True)
class DatasetRoot:
    """A dataset's root folder and whether paths may leave it."""

    folder: str
    allow_outside: bool = False

    @classmethod
    def of(cls, annotation: str, rules: RowRules, default: str | None = None) -> DatasetRoot:
        """The root of the annotation file at `annotation`: --image_dir, else `default`
        (the format's own, where it is not the file's folder), else the file's folder."""
        return cls(
            rules.image_dir or default or storage.split(annotation)[0],
            rules.allow_paths_outside_dataset,
        )

    def resolve(self, written: str, folder: str | None = None) -> str:
        """`written` as a URI: relative to `folder` (a folder under the root; the root
        itself by default), normalised (rows.resolve_uri)."""
        return resolve_uri(written, folder or self.folder)

    def outside(self, uri: str, what: str) -> tuple[str, str] | None:
        """None where `uri` may be read; else (path_outside_dataset, the message: `what`,
        the field and its path as the file writes it, then the root and the option)."""
        if self.admits(uri):
            return None
        return reasons.PATH_OUTSIDE_DATASET, (
            f"{what} leaves the dataset's folder {self.folder}: pass {OPTION} to read "
            "files outside it"
        )

    def admits(self, uri: str) -> bool:
        """Whether `uri` may be read: it is in the root, or the option lets it out."""
        return self.allow_outside or self.holds(uri)

    def holds(self, uri: str) -> bool:
        """Whether `uri` names the root or a file under it, where links lead (local)."""
        if storage.is_local(uri) != storage.is_local(self.folder):
            return False  # a URL or a bucket under a local root, or the other way round
        if not storage.is_local(uri):
            return storage.under(normalise_path(uri), normalise_path(self.folder))
        try:
            return storage.under(os.path.realpath(uri), self._real_folder)
        except ValueError:  # a NUL in the name: no such file, and reading it fails later
            return storage.under(
                os.path.abspath(normalise_path(uri)), os.path.abspath(normalise_path(self.folder))
            )

    @functools.cached_property
    def _real_folder(self) -> str:
        return os.path.realpath(self.folder or ".")


def quoted(text: str) -> str:
    """`text` quoted (repr) for a message: its first QUOTED_CHARACTERS characters, and
    how long it is where it is longer."""
    if len(text) <= QUOTED_CHARACTERS:
        return repr(text)
    return f"{text[:QUOTED_CHARACTERS]!r}{_cut(text)}"


def bounded(text: str) -> str:
    """`text` as it stands for a message, cut as `quoted` cuts it."""
    return text if len(text) <= QUOTED_CHARACTERS else text[:QUOTED_CHARACTERS] + _cut(text)


def _cut(text: str) -> str:
    return f"... ({len(text):,} characters)"
