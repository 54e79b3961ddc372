"""The combinations CI tests, as --version and docs/install.md list them, and the line a
run on another prints (pipeline/versions.py)."""

import re
from pathlib import Path

import pytest

from image_tfrecords.pipeline import versions
from image_tfrecords.pipeline.versions import TESTED

ROOT = Path(__file__).resolve().parents[1]


def pins() -> dict[str, str]:
    text = (ROOT / "requirements.txt").read_text(encoding="utf-8")
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", text, re.MULTILINE))


def test_the_pinned_set_is_the_first_tested_and_the_one_here():
    pinned = pins()
    first = TESTED[0]
    assert (first.beam, first.tensorflow, first.transform) == (
        pinned["apache-beam"],
        pinned["tensorflow"],
        pinned["tensorflow-transform"],
    )
    assert versions.this_combination()[:4] == first[:4]
    assert versions.untested_combination_line() is None


def test_setup_admits_every_tested_combination_and_its_floor_is_tested():
    setup = (ROOT / "setup.py").read_text(encoding="utf-8")
    floor = re.search(r'"apache-beam\[[a-z,]+\]>=([\d.]+),', setup).group(1)
    python_floor, python_bound = re.search(
        r'python_requires=">=([\d.]+),<([\d.]+)"', setup
    ).groups()
    assert floor + ".0" in {tested.beam for tested in TESTED}
    for tested in TESTED:
        assert (
            tuple(map(int, python_floor.split(".")))
            <= tuple(map(int, tested.python.split(".")))
            < tuple(map(int, python_bound.split(".")))
        )


@pytest.mark.parametrize(
    "here, nearest",
    [
        # A Beam released after the list: the newest tested on the same Python.
        (versions.TestedSet("3.11", "2.80.0", "2.21.0", "1.21.0", ""), TESTED[1]),
        (versions.TestedSet("3.13", "2.80.0", "2.21.0", "1.21.0", ""), TESTED[2]),
        # An older Beam than any tested, on a tested Python: the oldest.
        (versions.TestedSet("3.11", "2.70.0", "2.21.0", "1.21.0", ""), TESTED[3]),
        # Python 3.12: no set of it is tested; the closest Beam on any Python.
        (versions.TestedSet("3.12", "2.77.0", "2.21.0", "1.21.0", ""), TESTED[0]),
    ],
)
def test_an_untested_combination_names_the_nearest_tested(monkeypatch, here, nearest):
    monkeypatch.setattr(versions, "this_combination", lambda: here)
    line = versions.untested_combination_line()
    assert line == (
        f"image-tfrecords: {here.describe()} is not a combination tested here; the nearest "
        f"tested is {nearest.describe()} ({nearest.tested_by}). "
        "`image-tfrecords --version` lists them."
    )


def test_a_run_says_it_once(monkeypatch, capsys):
    monkeypatch.setattr(
        versions,
        "this_combination",
        lambda: versions.TestedSet("3.11", "2.80.0", "2.21.0", "1.21.0", ""),
    )
    monkeypatch.setattr(versions, "_said", False)
    versions.say_once_if_untested()
    versions.say_once_if_untested()
    assert capsys.readouterr().err.count("is not a combination tested here") == 1


def test_the_install_page_lists_every_tested_combination():
    page = (ROOT / "docs" / "install.md").read_text(encoding="utf-8")
    for tested in TESTED:
        assert (
            f"| {tested.python} | {tested.beam} | {tested.tensorflow} | {tested.transform} |"
            in page
        )
