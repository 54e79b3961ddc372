"""The versions a run records (summary.json, the resume fingerprint) and `--version` prints:
this package's and those of the libraries that decide what is written, read from the
installed packages' metadata, so that nothing is imported (TensorFlow takes seconds)."""

from __future__ import annotations

import importlib.metadata
import platform

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
    return (
        f"{PACKAGE} {versions[PACKAGE]} from {image_tfrecords.CODE_FOLDER} "
        f"(Python {platform.python_version()})\n{libraries}"
    )
