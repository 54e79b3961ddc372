"""report.html: one self-contained page of what a run wrote, to look at before training.

Its numbers come from summary.json only. What it shows besides them (thumbnails of a
sample per split and label, the first dead letters of each reason, copies side by side)
is a ReportContent: gathered in the pipeline from the writer's own decode
(report_content.py), or by `image-tfrecords report` from an existing output
(image_tfrecords/report.py). Both pick the same examples, by the ranks defined here.
Plots are pygal's SVG, inline, without pygal's script (a bar's numbers are its <title>,
which the browser shows on hover); thumbnails are data: URIs; the page has no script and
fetches nothing (no font or style either), so it works offline and downloaded from a
bucket. A failed run's page (its staged one, beside FAILED.json) opens on the failure.
Every number printed from summary.json carries its path there (data-summary), which is
how the tests check the page against the file.

Pure Python: no Beam, no TensorFlow.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import heapq
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple, TypeVar

import jinja2
import pygal
from pygal.style import DefaultStyle

from image_tfrecords.core.records.failure import Failure
from image_tfrecords.core.records.histograms import FILE_BYTE_BINS, LONGEST_SIDE_BINS
from image_tfrecords.core.records.splits import SPLITS
from image_tfrecords.core.records.summary import CHANGE_NAMES, CopiesInfo, SplitInfo, Summary
from image_tfrecords.core.worker.examples import ANNOTATION_NAMES

SAMPLE_PER_LABEL = 8  # thumbnails per split and label
PAIRS_SHOWN = 50  # copies of each kind shown side by side (all are in the .jsonl files)
# Leaks of each kind listed by name beyond those shown side by side: every leak, up to a
# page of a few MB (all are in the .jsonl files, which the page points to beyond this).
LEAKS_LISTED = 10_000
REJECTED_SHOWN = 5  # dead letters shown per reason
LABELS_PLOTTED = 40  # labels in the examples plot; the table below it has all of them
# Labels whose sample is shown: with 1,000 labels the page would hold 24,000 thumbnails.
LABELS_SAMPLED = 100
_Copy = TypeVar("_Copy")  # what first_copies ranks: a pipeline record or a report line
_PYGAL_DATED = re.compile(r"<!--Generated with pygal [^>]*-->")
# pygal writes its config as a script even with js=[] (no script file): the page has none.
_PYGAL_SCRIPT = re.compile(r"<script\b.*?</script>", re.DOTALL)


def sample_rank(uri: str) -> bytes:
    """The sample of a split and label is its examples of lowest rank: the same examples
    on every run, spread over the manifest rather than its first rows."""
    return hashlib.sha256(b"sample:" + uri.encode("utf-8", "surrogateescape")).digest()


def copy_rank(kept_split: str, split: str, manifest: str, line: int, uri: str) -> tuple:
    """The copies shown are the first in this order: leaks (a copy in another split than
    the image kept) before copies within a split, then by the copy's (the one not kept)
    split and row."""
    return kept_split == split, SPLITS.index(split), manifest, line, uri


def first_copies(copies: Iterable[_Copy], rank: Callable[[_Copy], tuple]) -> list[_Copy]:
    """The copies the page takes, in `rank` order (copy_rank's: leaks first): the first
    PAIRS_SHOWN, which it pictures, then leaks only, up to LEAKS_LISTED in all, which it
    lists by name (it lists no other copy)."""
    ranked = heapq.nsmallest(LEAKS_LISTED, copies, key=rank)
    # copy_rank's first value is False for a leak.
    return [copy for index, copy in enumerate(ranked) if index < PAIRS_SHOWN or not rank(copy)[0]]


def distinct(labels: Sequence[str]) -> tuple[str, ...]:
    """Each label once, in order: a copy's labels as the page shows them (detection's
    repeat one per object), and all it keeps of them."""
    return tuple(dict.fromkeys(labels))


def is_leak(split_pair: str) -> bool:
    """Whether a "kept split/copy split" of summary.json's by_splits names two splits."""
    kept, copy = split_pair.split("/")
    return kept != copy


class Pictured(NamedTuple):
    """An example as the page shows it."""

    uri: str
    split: str
    labels: tuple[str, ...]
    thumbnail: bytes | None  # a small JPEG (images.thumbnail_of); None when there is none


class CopyPair(NamedTuple):
    kept: Pictured
    copy: Pictured
    distance: int  # pHash bits apart; 0 for byte-identical images


class RejectedRow(NamedTuple):
    manifest: str
    line: int
    uri: str
    message: str


class CopiesShown(NamedTuple):
    """A section of copies: summary.json's numbers, the pairs pictured side by side and
    the leaks after them, listed by name."""

    kind: str  # "duplicates" or "near_duplicates": summary.json's key and the section's id
    heading: str
    numbers: CopiesInfo
    pictured: Sequence[CopyPair]  # the first PAIRS_SHOWN
    more_leaks: Sequence[CopyPair]
    by_splits: list[tuple[str, int]]  # numbers.by_splits, leaks first
    leaks: int  # copies in another split than the image kept
    leaks_pictured: int


@dataclasses.dataclass(frozen=True)
class ReportContent:
    """What the page shows besides summary.json's numbers."""

    samples: Mapping[str, Mapping[str, Sequence[Pictured]]]  # split -> label -> examples
    # The first copies by copy_rank (leaks first): PAIRS_SHOWN with their thumbnails (the
    # page pictures them), then up to LEAKS_LISTED in all, the page listing their leaks.
    duplicates: Sequence[CopyPair]
    near_duplicates: Sequence[CopyPair]
    dead_letters: Mapping[str, Sequence[RejectedRow]]  # reason -> the first rows


def render_report(
    summary: Summary, content: ReportContent, output_dir: str, failure: Failure | None = None
) -> str:
    """The page's HTML, for the output in `output_dir` that `summary` describes; given the
    `failure` of a run that published nothing, the page opens on it and nothing on it
    reads as a good run."""
    splits = {split: summary.splits.get(split, SplitInfo()) for split in SPLITS}
    labels = _labels(splits)
    reencoded = sorted({why for split in SPLITS for why in splits[split].reencoded})
    plotted = labels[:LABELS_PLOTTED]
    plots = {
        "labels": _bars("Examples per label", plotted, splits, "labels", rotate=len(plotted) > 8),
        "sides": _bars(
            "Source images by longest side", list(LONGEST_SIDE_BINS), splits, "longest_side"
        ),
        "bytes": _bars("Source files by size", list(FILE_BYTE_BINS), splits, "file_bytes"),
        "reencoded": _bars("Images re-encoded, by reason", reencoded, splits, "reencoded"),
    }
    return (
        _environment()
        .get_template("report_page.html")
        .render(
            summary=summary,
            split_counts=splits,
            content=content,
            output_dir=output_dir,
            failure=failure,
            splits=SPLITS,
            labels=labels,
            labels_plotted=LABELS_PLOTTED,
            change_names=dict(CHANGE_NAMES),
            plots=plots,
            labels_sampled=LABELS_SAMPLED,
            annotation_names=ANNOTATION_NAMES,
            side_bins=LONGEST_SIDE_BINS,
            byte_bins=FILE_BYTE_BINS,
            reencoded=reencoded,
            copies=[
                _copies_shown(
                    "duplicates", "Byte-identical images", summary.duplicates, content.duplicates
                ),
                _copies_shown(
                    "near_duplicates",
                    "Near-copies",
                    summary.near_duplicates,
                    content.near_duplicates,
                ),
            ],
        )
    )


def _copies_shown(
    kind: str, heading: str, numbers: CopiesInfo, pairs: Sequence[CopyPair]
) -> CopiesShown:
    by_splits = sorted(numbers.by_splits.items(), key=lambda item: not is_leak(item[0]))
    pictured = pairs[:PAIRS_SHOWN]
    return CopiesShown(
        kind,
        heading,
        numbers,
        pictured,
        more_leaks=[pair for pair in pairs[PAIRS_SHOWN:] if pair.kept.split != pair.copy.split],
        by_splits=by_splits,
        leaks=sum(count for pair, count in by_splits if is_leak(pair)),
        leaks_pictured=sum(pair.kept.split != pair.copy.split for pair in pictured),
    )


def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["data_uri"] = _data_uri
    environment.filters["path"] = lambda keys: json.dumps(list(keys), ensure_ascii=False)
    environment.tests["leak"] = is_leak
    return environment


def _data_uri(jpeg: bytes | None) -> str:
    return f"data:image/jpeg;base64,{base64.b64encode(jpeg).decode()}" if jpeg else ""


def _labels(splits: dict[str, SplitInfo]) -> list[str]:
    """Every label with an example, most TRAIN examples first (then VALIDATION, TEST)."""
    names = {label for split in SPLITS for label in splits[split].labels}
    return sorted(
        names, key=lambda label: ([-splits[split].labels.get(label, 0) for split in SPLITS], label)
    )


class _StaticBar(pygal.Bar):
    """pygal's bar chart for a page without script: each bar's numbers are its <title>,
    which the browser shows on hover (pygal's own tooltip is drawn by its script, from
    <desc> elements)."""

    def _tooltip_and_print_values(self, serie_node, serie, parent, i, val, *_) -> None:
        self.svg.node(parent, "title").text = f"{serie.title}, {self._get_x_label(i)}: {val}"


def _bars(
    title: str,
    categories: list[str],
    splits: dict[str, SplitInfo],
    counted: str,
    rotate: bool = False,
) -> str:
    """A bar chart of the `counted` counts of each split, a series per split, as inline SVG
    without script (pygal's tooltips would load one from the network). Its ticks are
    whole numbers (order_min=0: no step under 10**0), as counts are."""
    if not categories:
        return ""
    chart = _StaticBar(
        title=title,
        js=[],
        disable_xml_declaration=True,
        width=900,
        height=380,
        x_label_rotation=40 if rotate else 0,
        style=DefaultStyle,
        legend_at_bottom=True,
        truncate_label=24,
        order_min=0,
    )
    chart.uuid = counted  # the SVG's id: a random one by default
    chart.x_labels = categories
    for split in SPLITS:
        values = [getattr(splits[split], counted).get(category, 0) for category in categories]
        if any(values):
            chart.add(split, values)
    # Without the comment that dates it, the same summary gives the same page.
    return _PYGAL_SCRIPT.sub("", _PYGAL_DATED.sub("", chart.render(is_unicode=True)))
