"""The versions a run records (summary.json, the resume fingerprint) and `--version` prints:
this package's and those of the libraries that decide what is written, read from the
installed packages' metadata, so that nothing is imported (TensorFlow takes seconds).

And the combinations CI tests (TESTED): a run on another says so once, naming the
nearest tested one. setup.py admits more than is tested on any one day (Beam 2.69 to
2.x, TensorFlow 2.21, Python 3.11 to 3.13); tests/compat/ fails when the newest versions
pip resolves are not listed here, so the list follows what the tier passed.
"""

from __future__ import annotations

import importlib.metadata
import platform
import sys
from typing import NamedTuple

import image_tfrecords

PACKAGE = "image-tfrecords"
VERSIONED = (
    PACKAGE,
    "apache-beam",
    "tensorflow",
    "tensorflow-transform",
    "tfx-bsl",
    "pillow",
    "pyarrow",
    "numpy",
)


def installed_version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def installed_versions() -> dict[str, str]:
    return {name: installed_version(name) for name in VERSIONED}


def version_lines() -> str:
    """What `--version` prints: the package's version and the folder its code is imported
    from (a checkout, or a venv's site-packages), then the libraries'."""
    versions = installed_versions()
    libraries = ", ".join(f"{name} {versions[name]}" for name in VERSIONED[1:])
    tested = "\n".join(f"  {each.describe()}: {each.tested_by}" for each in TESTED)
    verdict = untested_combination_line() or "This combination is tested."
    return (
        f"{PACKAGE} {versions[PACKAGE]} from {image_tfrecords.CODE_FOLDER} "
        f"(Python {platform.python_version()})\n{libraries}\n"
        f"Tested combinations:\n{tested}\n{verdict}"
    )


class TestedSet(NamedTuple):
    """A combination of Python, Beam, TensorFlow and tf.Transform that CI tests."""

    python: str  # major.minor
    beam: str
    tensorflow: str
    transform: str
    tested_by: str

    def describe(self) -> str:
        return (
            f"apache-beam {self.beam}, tensorflow {self.tensorflow}, "
            f"tensorflow-transform {self.transform} on Python {self.python}"
        )


_SUITE = "the whole test suite (requirements.txt)"
_NEWEST = "the compatibility tier (tests/compat/): the newest versions pip resolves"
_OLDEST = "the compatibility tier (tests/compat/): the oldest Beam setup.py admits"
TESTED = (
    TestedSet("3.11", "2.77.0", "2.21.0", "1.21.0", _SUITE),
    TestedSet("3.11", "2.78.0", "2.21.0", "1.21.0", _NEWEST),
    TestedSet("3.13", "2.78.0", "2.21.0", "1.21.0", _NEWEST),
    TestedSet("3.11", "2.69.0", "2.21.0", "1.21.0", _OLDEST),
)


def this_combination() -> TestedSet:
    return TestedSet(
        f"{sys.version_info.major}.{sys.version_info.minor}",
        installed_version("apache-beam"),
        installed_version("tensorflow"),
        installed_version("tensorflow-transform"),
        "",
    )


def untested_combination_line() -> str | None:
    """A line saying that this environment is no tested combination, and which tested one
    is nearest (the same Python first, then the closest Beam); None for a tested one."""
    here = this_combination()
    if any(here[:4] == tested[:4] for tested in TESTED):
        return None
    nearest = min(
        TESTED,
        key=lambda tested: (
            tested.python != here.python,
            tested.tensorflow != here.tensorflow or tested.transform != here.transform,
            abs(_release(tested.beam) - _release(here.beam)),
        ),
    )
    return (
        f"image-tfrecords: {here.describe()} is not a combination tested here; the nearest "
        f"tested is {nearest.describe()} ({nearest.tested_by}). "
        "`image-tfrecords --version` lists them."
    )


_said = False


def say_once_if_untested() -> None:
    """On stderr, once per process: a run on an untested combination."""
    global _said
    line = untested_combination_line()
    if line and not _said:
        _said = True
        print(line, file=sys.stderr)


def _release(version: str) -> int:
    """2.78.0 -> 78: Beam's minor release, the distance between two Beams."""
    parts = version.split(".")
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
