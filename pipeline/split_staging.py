"""--split_by groups: a conversion in two runs, so that each image is read once.

1. The staging run converts every row into one split, in a folder of its own (under
   --temp_location or the local temp dir), copying what it can from the earlier output
   as a daily run does: its example index gives each image's SHA-256, pHash and labels.
2. The plan (core/launcher/grouped_split.py) groups the images and gives each its split.
3. The run asked for converts the rows again with the plan's splits, copying every
   example from the staging output (the examples hold no split, so a copy is the
   example a full read would write), and publishes with the plan's account in its
   summary.json. The staging folder is removed, unless the staging run failed: its
   error names the dead letters and FAILED.json there.

The second run's rows are read and checked again, so its summary accounts for every row
as any run's does; an image the staging run could not write (a dead letter) is read again
and fails again.
"""

from __future__ import annotations

import contextlib
import io
import sys
import tempfile
import uuid
from collections.abc import Callable, Sequence

from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions

from image_tfrecords.core.inputs.rows import ManifestError
from image_tfrecords.core.inputs.sources import FORMATS
from image_tfrecords.core.launcher.grouped_split import PlannedImage, plan_splits
from image_tfrecords.core.launcher.publishing import delete_tree
from image_tfrecords.core.records import naming
from image_tfrecords.core.records.chunks import ManifestSource
from image_tfrecords.core.records.example_index import read_index
from image_tfrecords.core.records.split_plan import write_plan
from image_tfrecords.core.records.summary import Summary
from image_tfrecords.core.storage import storage
from image_tfrecords.core.storage.redaction import redacted
from image_tfrecords.pipeline.options import ConvertOptions, folder_group_level
from image_tfrecords.pipeline.stage_lines import PREFIX, stage
from image_tfrecords.transforms.outcome import RunFailed

# What the staging run changes of the options asked: every row in TRAIN, each kept
# (an unseen label gets the OOV id, no copy dropped, no error fraction fails it), quietly.
_STAGING_OPTIONS = (
    "--split_by=uri",
    "--group_column=",
    "--split_column=none",
    "--split_fractions=1,0,0",
    "--unseen_label=oov",
    "--dedupe=none",
    "--max_error_fraction=1",
    "--quiet",
)


def convert_grouped(
    argv: Sequence[str],
    options: PipelineOptions,
    manifests: Sequence[ManifestSource],
    convert_and_report: Callable[[Sequence[str]], Summary | None],
) -> Summary | None:
    """The conversion of `argv` (with --split_by groups) in its two runs; `manifests`:
    the files it reads (none for an image folder's class folders)."""
    convert = options.view_as(ConvertOptions)
    parent = options.view_as(GoogleCloudOptions).temp_location or tempfile.gettempdir()
    staging = naming.split_staging_dir(parent, uuid.uuid4().hex[:12])
    staged = naming.staged_output(staging)
    earlier = convert.earlier_output()
    group_of = _declared_groups(convert, manifests)  # before any image is read
    keep_staging = False
    try:
        stage(
            "the grouped split: every row's split is made here (no split column is read); "
            "a staging run reads every image once"
        )
        reuse = [f"--reuse_from={earlier}"] if earlier and not convert.no_reuse else []
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                convert_and_report([*argv, *_STAGING_OPTIONS, f"--output_dir={staged}", *reuse])
        except RunFailed:
            # Its error names its dead letters and FAILED.json, in the staging folder.
            keep_staging = True
            print(
                f"{PREFIX}the grouped split's staging run (every row in one split, to read "
                f"each image once) failed; its folder is kept: {staging}",
                file=sys.stderr,
                flush=True,
            )
            raise
        plan = plan_splits(
            [image._replace(group=group_of(image.uri)) for image in _staged_images(staged)],
            convert.split_fraction_values(),
            convert.near_duplicate_distance,
            _earlier_splits(earlier) if earlier else None,
        )
        info = plan.info
        stage(
            f"the grouped split: {info.groups_kept_together} groups of copies kept together "
            f"({info.images_in_groups} of {info.images} images)"
            + (f"; {info.moved} images moved split" if info.moved else "")
        )
        path = naming.split_plan_file(staging)
        write_plan(path, plan.splits, info)
        return convert_and_report([*argv, f"--split_plan={path}", f"--staged_output={staged}"])
    finally:
        if not keep_staging:
            delete_tree(staging)


def _declared_groups(
    convert: ConvertOptions, manifests: Sequence[ManifestSource]
) -> Callable[[str], str | None]:
    """The --group_column value of each image URI: its folder some levels up, or what its
    manifest gives it (a column's value, an image entry's attribute: each format says,
    InputFormat.group_values; the rows only, no image), None for none."""
    if not convert.group_column:
        return lambda uri: None
    level = folder_group_level(convert.group_column)
    if level is not None:
        return lambda uri: uri.rsplit("/", level)[0] if uri.count("/") >= level else None
    if not manifests:
        raise ManifestError(
            f"--group_column {convert.group_column}: {convert.image_folder}'s class folders "
            "have no columns; give folder or folder:N for the images' folders"
        )
    rules, groups = convert.row_rules(), {}
    for source in manifests:
        for uri, group in FORMATS[source.format].group_values(source, rules, convert.group_column):
            groups[redacted(uri)] = group
    return groups.get


def _staged_images(output_dir: str) -> list[PlannedImage]:
    """Each image the staging output holds an example of."""
    return [image for image, _ in _indexed(output_dir)]


def _earlier_splits(output_dir: str) -> dict[str, str]:
    """The split of each image the earlier output holds (none where it has no index)."""
    return {image.uri: split for image, split in _indexed(output_dir)}


def _indexed(output_dir: str) -> list[tuple[PlannedImage, str]]:
    """Each example of the output at `output_dir`, by its shards' example indexes (read
    in name order: the plan does not depend on it), with its split."""
    found = []
    for path in sorted(m.path for m in storage.match(naming.every_published_index(output_dir))):
        if naming.indexed_shard(path) is None:  # not a name the run writes
            continue
        for entry in read_index(path):
            image = PlannedImage(entry.uri, entry.labels, entry.sha256, entry.perceptual_hash)
            found.append((image, entry.split))
    return found
