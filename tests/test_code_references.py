"""The files the code's docstrings and comments, docs/ and the READMEs point a reader to
exist: a module moved or renamed, or a constant renamed, leaves no pointer to where it was."""

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
# The folders our modules are in, as a path inside a package names them (`inputs/x.py`).
PACKAGES = ("image_tfrecords", "pipeline", "transforms", "core", "tests", "bench", "templates")
PATTERN_MARKS = ("<", "*", "{")  # OUTPUT/<split>-*.tfrecord names a pattern, not a file
BUILT = ("/target/", "dist/", "site/")  # build outputs the docs name: not in a clean clone
FILE_SUFFIX = re.compile(r"[a-z0-9]{1,5}(\.[a-z0-9]{1,5})*")  # what follows a file's stem


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
    yield from _missing_paths(text, modules)
    for match in MODULE_NAME.finditer(text):
        name = match.group(1)
        if name not in modules and name not in OTHER_PROJECTS_SCRIPTS:
            yield name


def _missing_paths(text: str, modules: set[str]) -> Iterator[str]:
    for match in PATH.finditer(text):
        path = match.group(1).rstrip(".")
        if any(mark in path for mark in PATTERN_MARKS) or text[match.end() :][:1] in (
            PATTERN_MARKS
        ):
            continue
        if any(folder in path for folder in BUILT):
            continue
        if path.split("/")[0] in TOP_LEVEL:
            if not (ROOT / path).exists() and not _an_attribute_of(ROOT / path):
                yield path
        elif _a_module_of_ours_where_it_is_not(path, modules):
            yield path


def _an_attribute_of(path: Path) -> bool:
    """`core/imaging/masks.MAX_KEYPOINTS`: a name its module (core/imaging/masks.py) defines."""
    stem, _, attribute = path.name.partition(".")
    module = path.with_name(f"{stem}.py")
    return (
        bool(attribute)
        and not FILE_SUFFIX.fullmatch(attribute)
        and module.exists()
        and re.search(rf"^(def |class )?{re.escape(attribute)}\b", module.read_text(), re.M)
        is not None
    )


def _a_module_of_ours_where_it_is_not(path: str, modules: set[str]) -> bool:
    """A path from inside a package (`inputs/boxes.py`, `inputs/boxes.pixel_box`) whose
    module is one of ours, in no package folder of ours: a folder that moved. A
    bare `folder/name` is left alone (a repository, `train/images`), as is a path that
    ends in another project's module (`tensorflow_datasets/core/file_adapters.py`)."""
    folders, _, name = path.rpartition("/")
    stem, _, attribute = name.partition(".")
    if not folders or not attribute or f"{stem}.py" not in modules:
        return False
    if attribute != "py" and FILE_SUFFIX.fullmatch(attribute):  # report.html, a.jpg
        return False
    return not any((ROOT / package / folders / f"{stem}.py").exists() for package in PACKAGES)


def _markdown_files() -> Iterator[Path]:
    """The documents a reader follows (bench/RESULTS.md is a dated log: its paths are
    where the code was on the day)."""
    yield ROOT / "README.md"
    yield ROOT / "tests" / "README.md"
    yield from (ROOT / "docs").rglob("*.md")


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
        "core/gone.py, core/worker/pool.py, OUTPUT/<split>-*.tfrecord, "
        "TFDS's tensorflow_datasets/core/naming.py, pool.py, gone.py"
    )
    assert list(_missing_references(text, modules)) == ["core/gone.py", "gone.py"]
    # A module of ours named under a folder that is gone, not another project's.
    text = "inputs/pool.py, other/pool.PEAK, core/worker/pool.py, ray/pool.md, tfds/core/gone.py"
    assert list(_missing_references(text, modules)) == ["inputs/pool.py", "other/pool.PEAK"]
    # A constant its module does not define.
    assert list(
        _missing_paths("core/imaging/masks.MAX_KEYPOINTS, core/imaging/masks.NOT_THERE", set())
    ) == ["core/imaging/masks.NOT_THERE"]


def test_every_path_of_ours_the_documents_name_exists():
    """docs/, the READMEs: a module named where it no longer is (in a folder since renamed)
    is reported as in the code's prose."""
    modules = {path.name for path in _python_files()}
    missing = [
        f"{path.relative_to(ROOT)}: {reference}"
        for path in _markdown_files()
        for reference in _missing_paths(path.read_text(encoding="utf-8"), modules)
    ]
    assert missing == []
