"""The files the code's docstrings and comments point a reader to exist: a module moved or
renamed leaves no pointer to where it was."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

from source_trees import parsed

ROOT = Path(__file__).resolve().parent.parent
PYTHON_FOLDERS = (
    "image_tfrecords",
    "pipeline",
    "transforms",
    "core",
    "tests",
    "bench",
    "templates",
    "examples",
    "docs",
)
TOP_LEVEL = {path.name for path in ROOT.iterdir() if not path.name.startswith(".")}
# A path: folders then a name, not inside a longer path or a URL (gs://b/x, OUT/.tmp-x/).
PATH = re.compile(r"(?<![\w/.:-])((?:[\w.-]+/)+[\w.-]*)")
MODULE_NAME = re.compile(r"(?<![\w/.-])(\w+\.py)\b")
# Other projects' scripts the docstrings cite by name, each beside its project's name.
OTHER_PROJECTS_SCRIPTS = {
    "build_image_data.py",  # TensorFlow models' Inception data script
    "create_coco_tf_record.py",  # the TF Object Detection API's dataset_tools
    "create_kitti_tf_record.py",
    "create_oid_tf_record.py",
    "create_pascal_tf_record.py",
    "oid_tfrecord_creation.py",
    "generate_tfrecord.py",  # the OD API tutorial's CSV scripts
    "xml_to_csv.py",
    "transformations.py",  # CVAT's cvat/apps/dataset_manager/formats/, with its commit
    "panoptic2detection_coco_format.py",  # cocodataset/panopticapi
}
PATTERN_MARKS = ("<", "*", "{")  # OUTPUT/<split>-*.tfrecord names a pattern, not a file


def _python_files() -> Iterator[Path]:
    for folder in PYTHON_FOLDERS:
        yield from (ROOT / folder).rglob("*.py")


def _prose(path: Path, tree: ast.Module) -> Iterator[str]:
    """The file's docstrings and comments."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            docstring = ast.get_docstring(node, clean=False)
            if docstring:
                yield docstring
    source = path.read_text(encoding="utf-8")
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.string


def _missing_references(text: str, modules: set[str]) -> Iterator[str]:
    for match in PATH.finditer(text):
        path = match.group(1).rstrip(".")
        if (
            path.split("/")[0] in TOP_LEVEL
            and not any(mark in path for mark in PATTERN_MARKS)
            and not (ROOT / path).exists()
        ):
            yield path
    for match in MODULE_NAME.finditer(text):
        name = match.group(1)
        if name not in modules and name not in OTHER_PROJECTS_SCRIPTS:
            yield name


def test_every_file_a_docstring_or_comment_names_exists():
    files = list(_python_files())
    modules = {path.name for path in [*files, *ROOT.glob("*.py")]}  # setup.py
    missing = [
        f"{path.relative_to(ROOT)}: {reference}"
        for path, tree in parsed(files).items()
        for text in _prose(path, tree)
        for reference in _missing_references(text, modules)
    ]
    assert missing == []


def test_a_moved_module_is_found():
    """The check itself: a path and a module name that do not exist are reported, a
    pattern, another project's path and an existing module are not."""
    modules = {"pool.py"}
    text = (
        "core/gone.py, core/pool.py, OUTPUT/<split>-*.tfrecord, "
        "TFDS's tensorflow_datasets/core/naming.py, pool.py, gone.py"
    )
    assert list(_missing_references(text, modules)) == ["core/gone.py", "gone.py"]
