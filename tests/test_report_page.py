"""report.html: rendered by a real browser (Debian's headless Chromium), its numbers equal
to summary.json's, nothing fetched from the network, thumbnails that are real images, the
same page content when `image-tfrecords report` rebuilds it from the output's files,
and, with --dedupe, a sample and histograms of what was written, not of what was dropped.
A failed run's page opens on its failure; leaks between splits come before copies within
one; thumbnails keep their aspect; counts get whole-number ticks; the page has no script.
"""

import base64
import heapq
import html.parser
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import convert, encode
from PIL import Image
from test_near_duplicates import PLANTED, scene

from image_tfrecords.core.imaging.images import THUMBNAIL_SIDE
from image_tfrecords.core.records.failure import Failure
from image_tfrecords.core.records.histograms import (
    FILE_BYTE_BINS,
    LONGEST_SIDE_BINS,
    file_bytes_bin,
    longest_side_bin,
)
from image_tfrecords.core.records.naming import REPORT_FILE
from image_tfrecords.core.records.records import ExampleRef
from image_tfrecords.core.records.summary import (
    ErrorsInfo,
    MovedRow,
    NearCopiesInfo,
    RunOptions,
    SplitGroups,
    SplitInfo,
    Summary,
)
from image_tfrecords.core.report.report_page import (
    LABELS_SAMPLED,
    LEAKS_LISTED,
    PAIRS_SHOWN,
    SAMPLE_PER_LABEL,
    CopyPair,
    Pictured,
    ReportContent,
    copy_rank,
    first_copies,
    render_report,
)
from image_tfrecords.pipeline.cli import report_main
from image_tfrecords.transforms.near_duplicates import NearDuplicate
from image_tfrecords.transforms.report_content import _copy_rank, _FirstCopies, _shown_copy

CHROMIUM = shutil.which("chromium")
# As the machine's notes give them: no sandbox as root, and none of Chromium's own
# connections (refused on a closed network, many at a time).
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def chromium(tmp_path, *args: str) -> str:
    """Runs headless Chromium with its own profile folder; returns what it printed."""
    if CHROMIUM is None:
        pytest.fail("Debian's chromium is not installed: `make test` installs it")
    done = subprocess.run(
        [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout


class Page(html.parser.HTMLParser):
    """What a rendered page shows: each data-summary element's path and text, and per
    section (the id of the h2 above it) the pictured URIs and their thumbnails."""

    def __init__(self, dom: str) -> None:
        super().__init__()
        self.numbers: list[tuple[list, str]] = []
        self.pictured: dict[str, list[str]] = {}
        self.thumbnails: list[str] = []  # data: URIs
        self.fetched: list[str] = []  # every src or href that is not data: or #anchor
        self.scripts_with_src = 0
        self.scripts = 0
        self.text: list[str] = []  # the body's text, in the page's order
        self.classes: set[str] = set()
        self._section = ""
        self._in_body = False
        self._open: list | None = None
        self.feed(dom)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "h2":
            self._section = attrs.get("id", "")
        if "data-summary" in attrs:
            self._open = [json.loads(attrs["data-summary"]), ""]
        for name in ("src", "href"):
            if name in attrs and not attrs[name].startswith(("data:", "#")):
                self.fetched.append(attrs[name])
        if tag == "script":
            self.scripts += 1
            self.scripts_with_src += bool(attrs.get("src"))
        if tag == "body":
            self._in_body = True
        self.classes.update((attrs.get("class") or "").split())
        if tag == "img":
            self.pictured.setdefault(self._section, []).append(attrs["alt"])
            self.thumbnails.append(attrs["src"])
        if tag == "span" and "missing" in attrs.get("class", ""):
            self.pictured.setdefault(self._section, []).append(None)

    def handle_data(self, data):
        if self._open is not None:
            self._open[1] += data
        if self._in_body and data.strip():
            self.text.append(" ".join(data.split()))

    def handle_endtag(self, tag):
        if self._open is not None:
            self.numbers.append(tuple(self._open))
            self._open = None


def at(summary, path):
    for key in path:
        summary = summary[key]
    return summary


def rendered(tmp_path, output) -> Page:
    return Page(chromium(tmp_path, "--dump-dom", (output / REPORT_FILE).as_uri()))


def test_the_page_renders_in_chromium_with_summary_json_numbers(sample_output, tmp_path):
    summary = json.loads((sample_output / "summary.json").read_text())
    page = rendered(tmp_path, sample_output)
    # Every number the page prints from summary.json is the file's, and none is missing.
    shown = {tuple(path): text.strip() for path, text in page.numbers}
    assert shown and all(text == str(at(summary, path)) for path, text in shown.items())
    expected = {
        ("rows_read",),
        ("rows_in_examples",),
        ("rows_dead_lettered",),
        ("examples_written",),
        ("near_duplicates", "copies"),
        ("near_duplicates", "by_splits", "train/train"),
        *(("errors", "by_reason", reason) for reason in summary["errors"]["by_reason"]),
        *(
            ("splits", split, counted, name)
            for split, stats in summary["splits"].items()
            for counted in ("labels", "longest_side", "file_bytes", "reencoded")
            for name in stats[counted]
        ),
        *(("splits", split, "examples") for split in summary["splits"]),
    }
    assert expected <= set(shown)
    assert summary["rows_read"] == 50 and summary["near_duplicates"]["copies"] == 4
    # Works offline: nothing to fetch, no script from anywhere.
    assert page.fetched == [] and page.scripts_with_src == 0
    # A sample of each label in each split: 8 of TRAIN's 10 or 11, all of TEST's 2.
    sample = page.pictured["sample"]
    assert len(sample) == len(set(sample)) == 3 * SAMPLE_PER_LABEL + 3 * 2 + 3 * 2
    # Near-copies side by side, both images pictured.
    near = page.pictured["near_duplicates"]
    assert len(near) == 2 * 4 and None not in near
    for uri in page.thumbnails:
        thumbnail = Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1])))
        assert thumbnail.format == "JPEG" and 0 < max(thumbnail.size) <= THUMBNAIL_SIDE
    # The screenshot is a page with content: text, plots and pictures, not a blank.
    chromium(
        tmp_path,
        "--window-size=1200,3000",
        f"--screenshot={tmp_path / 'shot.png'}",
        (sample_output / REPORT_FILE).as_uri(),
    )
    with Image.open(tmp_path / "shot.png") as shot:
        assert shot.size == (1200, 3000)
        colours = shot.convert("RGB").getcolors(maxcolors=1 << 20)
    assert len(colours) > 500
    background = max(colours)[0] / (1200 * 3000)
    assert background < 0.9
    # No script at all (pygal's charts come with one), and the page is not a failed run's.
    assert page.scripts == 0 and "failed" not in page.classes


def test_the_histograms_count_every_example():
    assert [longest_side_bin(side) for side in (1, 64, 65, 4096, 4097)] == [
        LONGEST_SIDE_BINS[0],
        LONGEST_SIDE_BINS[0],
        LONGEST_SIDE_BINS[1],
        LONGEST_SIDE_BINS[-2],
        LONGEST_SIDE_BINS[-1],
    ]
    assert [file_bytes_bin(size) for size in (0, 4096, 4097, 16 << 20, (16 << 20) + 1)] == [
        FILE_BYTE_BINS[0],
        FILE_BYTE_BINS[0],
        FILE_BYTE_BINS[1],
        FILE_BYTE_BINS[-2],
        FILE_BYTE_BINS[-1],
    ]


@pytest.fixture(scope="module")
def leaky(tmp_path_factory):
    """TRAIN: 12 distinct scenes, 10 of label a. TEST: 3 distinct scenes, a resized copy
    of scene 1 (a near-copy leak), a byte-identical copy of scene 2 (a duplicate), a
    missing file and a row with no label."""
    root = tmp_path_factory.mktemp("leaky")
    rows = []
    for seed in range(12):
        (root / f"scene{seed}.jpg").write_bytes(encode(scene(seed), "JPEG", quality=90))
        rows.append(f"TRAIN,scene{seed}.jpg,{'a' if seed < 10 else 'b'}")
    for seed in range(20, 23):
        (root / f"scene{seed}.jpg").write_bytes(encode(scene(seed), "JPEG", quality=90))
        rows.append(f"TEST,scene{seed}.jpg,b")
    (root / "scene1_small.jpg").write_bytes(PLANTED["resized"](scene(1)))
    shutil.copy(root / "scene2.jpg", root / "scene2_copy.jpg")
    rows += [
        "TEST,scene1_small.jpg,a",
        "TEST,scene2_copy.jpg,a",
        "TEST,gone.jpg,a",
        "TEST,scene20.jpg,",
    ]
    (root / "m.csv").write_text("\n".join(rows) + "\n")
    return root / "m.csv"


def test_with_dedupe_the_report_shows_what_was_written(leaky, tmp_path):
    output = convert(
        tmp_path / "out",
        "--manifest",
        str(leaky),
        "--dedupe",
        "near",
        "--num_shards",
        "2",
        "--max_error_fraction",
        "0.5",
    )
    summary = json.loads((output / "summary.json").read_text())
    assert summary["duplicates"]["by_splits"] == {"train/test": 1}
    assert summary["near_duplicates"]["by_splits"] == {"train/test": 1}
    for stats in summary["splits"].values():  # the dropped copies are taken out
        assert sum(stats["longest_side"].values()) == stats["examples"]
        assert sum(stats["file_bytes"].values()) == stats["examples"]
    assert summary["splits"]["test"]["examples"] == 3
    page = rendered(tmp_path, output)
    assert all(text.strip() == str(at(summary, path)) for path, text in page.numbers)
    sample = page.pictured["sample"]
    assert len(sample) == SAMPLE_PER_LABEL + 2 + 3  # TRAIN a, TRAIN b, TEST b
    assert not any("scene1_small" in uri or "scene2_copy" in uri for uri in sample)
    # The copies are shown with both thumbnails: the dropped one's from the writer's decode.
    for kind in ("duplicates", "near_duplicates"):
        kept, copy = page.pictured[kind]
        assert None not in (kept, copy)
    assert page.pictured["duplicates"][1].endswith("scene2_copy.jpg")

    # Rebuilt from the output's files: the same numbers, sample and copies (a dropped copy
    # is not in the shards, so it has no thumbnail there).
    (output / REPORT_FILE).unlink()
    assert report_main([str(output)]) == 0
    rebuilt = rendered(tmp_path, output)
    assert rebuilt.numbers == page.numbers
    assert rebuilt.pictured["sample"] == sample
    for kind in ("duplicates", "near_duplicates"):
        assert rebuilt.pictured[kind] == [page.pictured[kind][0], None]


def test_the_report_is_rebuilt_from_a_gzip_output(gzip_output, tmp_path):
    copy = shutil.copytree(gzip_output, tmp_path / "copy")
    original = rendered(tmp_path, copy)
    (copy / REPORT_FILE).unlink()
    # The installed command, as a user runs it.
    command = Path(sys.executable).parent / "image-tfrecords"
    done = subprocess.run(
        [str(command), "report", str(copy)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"written: {copy / REPORT_FILE}\n"
    rebuilt = rendered(tmp_path, copy)
    assert rebuilt.numbers == original.numbers
    assert rebuilt.pictured == original.pictured


def test_with_many_labels_the_sample_shows_those_with_most_train_examples():
    """1,000 classes would make a page of 24,000 thumbnails: the sample shows 100 labels,
    those with the most TRAIN examples; the table still counts every label."""
    labels = {f"class{index:03d}": 1000 - index for index in range(150)}
    examples = sum(labels.values())
    summary = Summary(
        options=RunOptions(),
        rows_read=examples,
        rows_in_examples=examples,
        examples_written=examples,
        rows_dead_lettered=0,
        accounted=True,
        error_fraction=0.0,
        vocabulary={"label": list(labels)},
        splits={"train": SplitInfo(examples=examples, labels=labels)},
    )
    samples = {
        "train": {
            label: [Pictured(f"/{label}.jpg", "train", (label,), b"\xff\xd8")] for label in labels
        }
    }
    page = Page(render_report(summary, ReportContent(samples, [], [], {}), "out"))
    assert page.pictured["sample"] == [f"/class{index:03d}.jpg" for index in range(LABELS_SAMPLED)]
    assert {tuple(path) for path, _ in page.numbers} >= {
        ("splits", "train", "labels", label) for label in labels
    }


def test_objects_left_out_are_counted_by_shape_under_the_accounting(tmp_path):
    """Shapes the examples cannot hold (a CVAT task's polylines and points) are named with
    their counts, summary.json's, in the page Chromium renders."""
    summary = Summary(
        options=RunOptions(label_mode="detection"),
        rows_read=6,
        rows_in_examples=2,
        examples_written=1,
        rows_dead_lettered=0,
        rows_discarded=4,
        objects_left_out={"points": 1, "polyline": 3},
        accounted=True,
        error_fraction=0.0,
        vocabulary={"label": ["cat"]},
        splits={"train": SplitInfo(examples=1, labels={"cat": 2})},
    )
    (tmp_path / REPORT_FILE).write_text(
        render_report(summary, ReportContent({}, [], [], {}), "out")
    )
    page = rendered(tmp_path, tmp_path)
    shown = {tuple(path): text.strip() for path, text in page.numbers}
    assert {path: text for path, text in shown.items() if path[0] == "objects_left_out"} == {
        ("objects_left_out", "points"): "1",
        ("objects_left_out", "polyline"): "3",
    }
    assert shown[("rows_discarded",)] == "4"


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (
            '{"manifest": "m.csv", "line": 3, "uri": "a.jpg", "message": "no"}',
            "reason: Field required",
        ),
        (
            '{"manifest": "m.csv", "line": "three", "uri": "a.jpg", "reason": "r", '
            '"message": "no"}',
            "line: Input should be a valid integer",
        ),
        ('["m.csv", 3]', "the line: Input should be a valid dictionary"),
        ('{"manifest": "m.csv", "line": 3,', "not JSON"),
    ],
    ids=["no reason", "line not a number", "not an object", "not JSON"],
)
def test_a_dead_letter_line_that_is_not_one_is_named_not_a_traceback(
    tfrecord_output, tmp_path, capsys, line, why
):
    output = shutil.copytree(tfrecord_output, tmp_path / "out")
    (errors,) = output.glob("errors-*.jsonl")
    lines = errors.read_text().splitlines()
    errors.write_text("\n".join([lines[0], line, *lines[1:]]) + "\n")
    assert report_main([str(output)]) == 1
    error = capsys.readouterr().err
    assert f"error: {output}: {errors.name} line 2: " in error and why in error, error


class YTicks(html.parser.HTMLParser):
    """The y-axis tick labels of each chart (pygal's `axis y` group)."""

    def __init__(self, dom: str) -> None:
        super().__init__()
        self.charts: list[list[str]] = []
        self._depth = 0  # of <g> inside the open y axis; 0: none open
        self._in_text = False
        self.feed(dom)

    def handle_starttag(self, tag, attrs):
        if tag == "g" and self._depth:
            self._depth += 1
        elif tag == "g" and (dict(attrs).get("class") or "").startswith("axis y"):
            self._depth = 1
            self.charts.append([])
        self._in_text = tag == "text" and self._depth > 0

    def handle_endtag(self, tag):
        if tag == "g" and self._depth:
            self._depth -= 1
        self._in_text = False

    def handle_data(self, data):
        if self._in_text:
            self.charts[-1].append(data.strip())


def solid(colour: tuple[int, int, int], size: tuple[int, int]) -> bytes:
    return encode(Image.new("RGB", size, colour), "JPEG", quality=95)


def box_of(shot: Image.Image, colour: tuple[int, int, int]) -> tuple[int, int]:
    """The width and height of the region of the screenshot painted in `colour` (0, 0:
    none)."""
    near = (abs(np.asarray(shot, dtype=int) - colour) < 48).all(axis=2)
    ys, xs = np.nonzero(near)
    return (int(xs.max() - xs.min() + 1), int(ys.max() - ys.min() + 1)) if len(xs) else (0, 0)


MAGENTA, GREEN = (255, 0, 255), (0, 255, 0)


def failed_run() -> tuple[Summary, ReportContent, Failure]:
    """A run that failed its outcome check (40% dead letters), as its staged report shows
    it: 60 near-copies within TRAIN and 60 between TRAIN and VALIDATION (leaks), a wide
    thumbnail in the sample and in the first leak."""
    pairs = 60
    near = NearCopiesInfo(
        copies=2 * pairs,
        max_distance=8,
        by_splits={"train/train": pairs, "train/validation": pairs},
        files=("near_duplicates-00000-of-00001.jsonl",),
    )
    summary = Summary(
        options=RunOptions(),
        rows_read=10,
        rows_in_examples=6,
        examples_written=6,
        rows_dead_lettered=4,
        accounted=True,
        error_fraction=0.4,
        vocabulary={"label": ["cat"]},
        errors=ErrorsInfo(by_reason={"file_not_found": 4}, files=("errors-00000-of-00001.jsonl",)),
        near_duplicates=near,
        splits={
            "train": SplitInfo(examples=3, labels={"cat": 3}),
            "validation": SplitInfo(examples=3, labels={"cat": 3}),
        },
    )
    grey = solid((128, 128, 128), (8, 8))
    copies = []
    for index in range(pairs):
        kept = Pictured(f"/kept{index}.jpg", "train", ("cat",), grey)
        copies.append(CopyPair(kept, Pictured(f"/within{index}.jpg", "train", ("cat",), grey), 3))
        wide = solid(GREEN, (96, 32)) if index == 0 else grey
        copies.append(
            CopyPair(
                kept._replace(thumbnail=wide),
                Pictured(f"/leak{index}.jpg", "validation", ("cat",), grey),
                3,
            )
        )
    # The first of them, as the pipeline and `report` pick them.
    shown = heapq.nsmallest(
        LEAKS_LISTED,
        copies,
        key=lambda pair: copy_rank(
            pair.kept.split,
            pair.copy.split,
            "m.csv",
            int(re.sub(r"\D", "", pair.copy.uri)),
            pair.copy.uri,
        ),
    )
    content = ReportContent(
        samples={
            "train": {"cat": [Pictured("/wide.jpg", "train", ("cat",), solid(MAGENTA, (96, 24)))]}
        },
        duplicates=[],
        near_duplicates=shown,
        dead_letters={},
    )
    failure = Failure(
        problems=("40.0% of rows were dead-lettered, more than --max_error_fraction 1.0%",),
        dead_letters=("out/.tmp-1/staged/errors-00000-of-00001.jsonl",),
        record="out/.tmp-1/staged/FAILED.json",
        summary=summary,
    )
    return summary, content, failure


def test_a_failed_runs_page_opens_on_its_failure_with_leaks_first(tmp_path):
    summary, content, failure = failed_run()
    (tmp_path / REPORT_FILE).write_text(render_report(summary, content, "out", failure))
    dom = chromium(tmp_path, "--dump-dom", (tmp_path / REPORT_FILE).as_uri())
    page = Page(dom)
    # The first words are the failure, its reason and where FAILED.json is; nothing that
    # reads as a good run.
    text = " ".join(page.text)
    assert page.text[0].startswith("This run FAILED"), page.text[:3]
    assert text.index(failure.problems[0]) < text.index(failure.record) < text.index("Rows read")
    assert failure.dead_letters[0] in text
    assert "accounted for" not in text and "good" not in page.classes
    # Leaks first: every pair shown is one (60 leaks, 50 shown), the split pairs' table
    # too, and the other 10 are listed by name under them.
    near = page.pictured["near_duplicates"]
    assert [uri for uri in near if "/leak" in uri or "/within" in uri] == [
        f"/leak{index}.jpg" for index in range(PAIRS_SHOWN)
    ]
    assert text.index("train/validation (leak)") < text.index("train/train")
    assert (
        "The first 50 of 120 copies, leaks first: 50 of the 60 leaks; the next 10 are listed below."
    ) in text
    listed = text[text.index("The next 10 leaks, by name") :]
    assert [re.sub(r"\D", "", uri) for uri in re.findall(r"/\w+\.jpg", listed)] == [
        str(index) for index in range(PAIRS_SHOWN, 60) for _ in ("kept", "leak")
    ]
    # No script; each bar's numbers as its <title>; whole-number ticks on every count axis.
    assert page.scripts == 0 and "<title>train, cat: 3</title>" in dom
    ticks = YTicks(dom).charts
    assert ticks and all(labels and all(label.isdigit() for label in labels) for labels in ticks), (
        ticks
    )
    # Looked at: the failure is the top of the page; wide thumbnails stay wide.
    chromium(
        tmp_path,
        "--window-size=1200,4000",
        f"--screenshot={tmp_path / 'shot.png'}",
        (tmp_path / REPORT_FILE).as_uri(),
    )
    with Image.open(tmp_path / "shot.png") as shot:
        shot = shot.convert("RGB")
    top = shot.crop((0, 0, shot.width, 160))
    assert box_of(top, (176, 0, 32))[0] > 0  # the failure's red rule
    for colour, aspect in ((MAGENTA, 4), (GREEN, 3)):
        width, height = box_of(shot, colour)
        assert abs(width / height - aspect) < 0.25 * aspect, (colour, width, height)


def test_leaks_beyond_those_listed_are_pointed_to_in_their_files():
    """More leaks than the page lists (LEAKS_LISTED): the note says how many, which files
    hold them all and how to pick them out."""
    summary, content, _ = failed_run()
    near = summary.near_duplicates.model_copy(
        update={"copies": 20_060, "by_splits": {"train/train": 60, "train/validation": 20_000}}
    )
    page = Page(render_report(summary.model_copy(update={"near_duplicates": near}), content, "out"))
    assert (
        "The first 50 of 20060 copies, leaks first: 50 of the 20000 leaks; the next 10 "
        "are listed below. Every one is in near_duplicates-00000-of-00001.jsonl, the "
        "lines whose kept and copy splits differ: jq -c 'select(.kept.split != "
        ".copy.split)' near_duplicates-00000-of-00001.jsonl"
    ) in " ".join(page.text)


def test_the_copies_taken_are_the_first_pictured_then_leaks_only():
    """first_copies, what the pipeline's combiner and `report` both hold: the first
    PAIRS_SHOWN by copy_rank, then leaks only (the page lists no other copy), up to
    LEAKS_LISTED in all, whatever order the copies come in."""

    def copy(kept_split, split, line):
        return (kept_split, split, "m.csv", line, f"/{split}{line}.jpg")

    def rank(pair):
        return copy_rank(*pair)

    leaks = [copy("train", "test", line) for line in range(PAIRS_SHOWN + 5)]
    within = [copy("train", "train", line) for line in range(2 * PAIRS_SHOWN)]
    taken = first_copies(reversed(within + leaks), rank)
    assert taken == leaks  # every leak, in order; none of the copies within a split
    few_leaks = leaks[:3]
    assert first_copies(within + few_leaks, rank) == few_leaks + within[: PAIRS_SHOWN - 3]
    many = [copy("train", "validation", line) for line in range(LEAKS_LISTED + 7)]
    assert first_copies(many[::-1], rank) == many[:LEAKS_LISTED]


def test_the_pipeline_takes_the_copies_a_batch_at_a_time_as_first_copies_takes_them():
    """report_content's combiner, fed batches (cut down as it goes) and merged, holds what
    first_copies takes of all the copies at once."""

    def ref(split, line):
        return ExampleRef(
            split, 0, line, "m.csv", line, f"/{split}/{line}.jpg", ("a", "a"), 0, None
        )

    splits = ("train", "validation", "test")
    copies = [
        NearDuplicate(3, ref("train", line), ref(splits[line % 3], line + 1))
        for line in range(3 * LEAKS_LISTED)
    ]
    combine = _FirstCopies()
    halves = []
    for half in (copies[::2], copies[1::2]):
        held = combine.create_accumulator()
        for start in range(0, len(half), 700):
            held = combine.add_input(held, half[start : start + 700])
        assert len(held) <= 2 * LEAKS_LISTED + 700
        halves.append(held)
    taken = combine.extract_output(combine.merge_accumulators(halves))
    assert list(taken) == first_copies(map(_shown_copy, copies), _copy_rank)
    assert len(taken) == LEAKS_LISTED and taken[0].copy.labels == ("a",)


def test_a_grouped_split_shows_what_it_kept_together_and_the_label_shares_side_by_side(tmp_path):
    """--split_by groups: the groups' counts (summary.json's, by path), each label's share
    of every split beside the whole's, the fractions asked, and what could not be done."""
    groups = SplitGroups(
        images=40,
        groups_kept_together=6,
        images_in_groups=15,
        largest_group=5,
        fractions_asked={"train": 0.8, "validation": 0.1, "test": 0.1},
        fractions={"train": 0.85, "validation": 0.1, "test": 0.05},
        labels={
            "train": {"cat": 0.6, "dog": 0.4},
            "validation": {"cat": 0.5, "dog": 0.5},
            "test": {"cat": 1.0},
        },
        labels_whole={"cat": 0.6, "dog": 0.4},
        moved=1,
        moved_listed=(MovedRow(uri="/d/a.jpg", was="test", now="train"),),
        problems=("test holds 5.0% of the images, not the 10.0% asked: ...",),
    )
    summary = Summary(
        rows_read=40,
        rows_in_examples=40,
        examples_written=40,
        rows_dead_lettered=0,
        accounted=True,
        error_fraction=0.0,
        vocabulary={"label": ["cat", "dog"]},
        splits={"train": SplitInfo(examples=34, labels={"cat": 20, "dog": 14})},
        split_groups=groups,
        options=RunOptions(),
    )
    (tmp_path / REPORT_FILE).write_text(
        render_report(summary, ReportContent({}, [], [], {}), "out")
    )
    page = rendered(tmp_path, tmp_path)
    shown = {tuple(path): text.strip() for path, text in page.numbers if path[0] == "split_groups"}
    assert shown == {
        ("split_groups", "groups_kept_together"): "6",
        ("split_groups", "images_in_groups"): "15",
        ("split_groups", "images"): "40",
        ("split_groups", "largest_group"): "5",
        ("split_groups", "moved"): "1",
    }
    text = " ".join(page.text)
    assert "cat 60.0% 60.0% 50.0% 100.0%" in text and "dog 40.0% 40.0% 50.0% 0.0%" in text
    assert "images 100% 85.0% (asked 80%) 10.0% (asked 10%) 5.0% (asked 10%)" in text
    assert "/d/a.jpg test → train" in text
    assert "test holds 5.0% of the images, not the 10.0% asked" in text and "bad" in page.classes
