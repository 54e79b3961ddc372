"""Every input format's reader, fed mutations of real files, fails only as documented.

For each format a small dataset is laid out in a temporary folder from the public sample
files (tests/data/public/, sample_data/) and the small fixtures the format tests build;
then hypothesis mutates one of its files, byte by byte (flips, cuts, insertions) or by
its structure (JSON, XML, YAML, lines of fields: a value replaced by a huge or negative
number, deep nesting, a very long string, a path out of the dataset, a value of the
wrong type), and the dataset is read as the launcher and the workers read it:
find_manifests, check_sources, class_declarations, then every source's rows.

Whatever the mutation, the reading
- raises nothing but ManifestError (the reader's usage error); every bad row is a dead
  letter whose reason is in core/records/dead_letters.py's REGISTRY;
- allocates a bounded amount of memory (tracemalloc's peak, MEMORY_CAP);
- opens, lists and yields no path outside the dataset's folder (an audit hook records
  every file opened or listed; a row's image, segmentation map or mask PNG must be
  inside), except the image a CSV-like manifest names itself (its documented rule);
- writes, removes or renames no file, and starts no other program.

An earlier output's example index, mutated the same ways, is read as `diff` compares it
and as --reuse_from routes it: NotComparable or ExampleIndexError only, bounded memory,
and no routed entry holds labels.

Seeded (derandomize) and bounded (EXAMPLES a test) so the file runs in CI's budget; raise
EXAMPLES, or set derandomize=False, to search further.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import sys
import tracemalloc
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple
from xml.sax.saxutils import escape as xml_escape

import pytest
import yaml
from conftest import encode, photo_like
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

from image_tfrecords.core.inputs.folder import IMAGE_FOLDER
from image_tfrecords.core.inputs.rows import DiscardedRow, ManifestError, RowRules
from image_tfrecords.core.inputs.sources import (
    check_sources,
    class_declarations,
    find_manifests,
    read_source,
)
from image_tfrecords.core.records.chunks import ManifestSource
from image_tfrecords.core.records.dead_letters import REGISTRY, DeadLetter
from image_tfrecords.core.records.records import ManifestRow

PUBLIC = Path(__file__).parent / "data" / "public"
SAMPLE = Path(__file__).parent.parent / "sample_data"
# What one reading of a dataset of a few small files may allocate at its peak: the
# readers hold a file's annotations, never pixels an annotation declares.
MEMORY_CAP = 200 << 20
DETECTION = RowRules(label_mode="detection")
# Each test's examples: together the file stays within CI's budget (~40 s on 2 cores).
EXAMPLES = 4


# --- what a reading touches -------------------------------------------------------------

_EVENTS_READ = frozenset({"open", "os.listdir", "os.scandir", "glob.glob", "glob.glob/2"})
_EVENTS_WRITE = (
    "os.mkdir",
    "os.remove",
    "os.rmdir",
    "os.rename",
    "os.symlink",
    "os.link",
    "os.truncate",
    "os.chmod",
    "shutil.rmtree",
    "shutil.move",
)
_EVENTS_RUN = (
    "subprocess.Popen",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.startfile",
    "ctypes.dlopen",
)
_recording: list[tuple[str, str]] | None = None


def _audit(event: str, args: tuple) -> None:
    if _recording is None:
        return
    if event in _EVENTS_READ:
        path = args[0] if args else None
        if isinstance(path, (str, bytes, os.PathLike)):
            _recording.append((event, os.fsdecode(path)))
    elif event in _EVENTS_WRITE or event in _EVENTS_RUN:
        _recording.append((event, repr(args)[:200]))


sys.addaudithook(_audit)  # a hook stays for the process: it records only inside touched()
# Python's own files (a module imported lazily, its bytecode) are no data the reader opens.
_RUNTIME = tuple(
    {
        os.path.realpath(prefix) + os.sep
        for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix)
        if prefix
    }
    | {"/proc/", "/sys/", "/dev/"}
)


@contextlib.contextmanager
def touched() -> Iterator[list[tuple[str, str]]]:
    """The (audit event, path or arguments) of every file the block opens or lists, and
    of anything it writes or runs."""
    global _recording
    found: list[tuple[str, str]] = []
    _recording = found
    try:
        yield found
    finally:
        _recording = None


def _is_runtime(path: str) -> bool:
    real = os.path.realpath(path)
    return real.startswith(_RUNTIME) or real.endswith((".py", ".pyc", ".so"))


# --- the datasets -----------------------------------------------------------------------


class Dataset(NamedTuple):
    """A dataset laid out in `root`: what --manifest names (or the image folder), the
    files a mutation may change, how it is read, and whether its rows may name images
    anywhere (a CSV-like manifest: an absolute path or `../` is the user's choice)."""

    root: Path
    arguments: tuple[str, ...]
    targets: tuple[Path, ...]
    rules: RowRules = RowRules()
    input_format: str | None = None
    rows_name_any_path: bool = False
    image_folder: bool = False


def _copy(source: Path, destination: Path) -> Path:
    destination.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(source, destination)
    return destination


def _jpeg(path: Path, size=(16, 12)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode(photo_like(*size, seed=len(path.name)), "JPEG"))


def csv_classification(root: Path) -> Dataset:
    manifest = _copy(SAMPLE / "manifest.csv", root / "manifest.csv")
    return Dataset(root, (str(manifest),), (manifest,), rows_name_any_path=True)


def csv_detection(root: Path) -> Dataset:
    manifest = _copy(SAMPLE / "detection.csv", root / "detection.csv")
    return Dataset(root, (str(manifest),), (manifest,), DETECTION, rows_name_any_path=True)


def od_api_csv(root: Path) -> Dataset:
    """The TF Object Detection API's CSV (filename,width,height,class,xmin,...)."""
    manifest = _copy(SAMPLE / "detection" / "api" / "train_labels.csv", root / "labels.csv")
    return Dataset(root, (str(manifest),), (manifest,), DETECTION, rows_name_any_path=True)


def vertex_jsonl(root: Path) -> Dataset:
    lines = [
        {
            "imageGcsUri": "img/a.jpg",
            "classificationAnnotation": {"displayName": "cat"},
            "dataItemResourceLabels": {"aiplatform.googleapis.com/ml_use": "training"},
        },
        {
            "imageGcsUri": "img/b.jpg",
            "classificationAnnotations": [{"displayName": "dog"}, {"displayName": "cat"}],
        },
        {
            "imageGcsUri": "img/g.jpg",
            "boundingBoxAnnotations": [
                {"displayName": "cat", "xMin": 0.05, "yMin": 0.1, "xMax": 0.45, "yMax": 0.9}
            ],
        },
    ]
    manifest = root / "manifest.jsonl"
    manifest.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return Dataset(
        root, (str(manifest),), (manifest,), RowRules(label_mode="multi"), rows_name_any_path=True
    )


def pascal_voc(root: Path) -> Dataset:
    shutil.copytree(SAMPLE / "detection" / "voc", root / "voc")
    devkit = root / "voc" / "VOC2007"
    targets = sorted((devkit / "Annotations").glob("*.xml")) + sorted(
        (devkit / "ImageSets" / "Main").glob("*.txt")
    )
    return Dataset(root, (str(devkit),), tuple(targets), DETECTION)


def coco(root: Path) -> Dataset:
    files = [_copy(SAMPLE / "detection" / "coco" / "instances.json", root / "instances.json")]
    files += [
        _copy(PUBLIC / "coco" / name, root / name)
        for name in (
            "datumaro_instances_val.json",
            "datumaro_person_keypoints_val.json",
            "mmpose_crowdpose_test.json",
        )
    ]
    return Dataset(root, tuple(map(str, files)), tuple(files), DETECTION)


def coco_panoptic(root: Path) -> Dataset:
    annotations = _copy(PUBLIC / "coco" / "panoptic_examples.json", root / "panoptic.json")
    shutil.copytree(PUBLIC / "coco" / "panoptic_examples", root / "panoptic")
    return Dataset(
        root,
        (str(annotations),),
        (annotations, *sorted((root / "panoptic").glob("*.png"))),
        DETECTION,
    )


def cvat(root: Path) -> Dataset:
    files = [
        _copy(PUBLIC / "cvat" / name, root / name)
        for name in ("datumaro_task_train.xml", "datumaro_project_annotations.xml")
    ]
    return Dataset(root, tuple(map(str, files)), tuple(files), DETECTION)


def label_studio(root: Path) -> Dataset:
    """Label Studio's converter's and SDK's exports; two name their images `/image1`..."""
    files = [
        _copy(file, root / file.name) for file in sorted((PUBLIC / "label_studio").glob("*.json"))
    ]
    return Dataset(root, tuple(map(str, files)), tuple(files), DETECTION)


def label_studio_relative(root: Path) -> Dataset:
    """The SDK's export alone, whose image is named relative to it (`test_image1.jpg`)."""
    file = _copy(PUBLIC / "label_studio" / "rect_poly_coco_data.json", root / "tasks.json")
    return Dataset(root, (str(file),), (file,), DETECTION)


def labelme(root: Path) -> Dataset:
    """X-AnyLabeling's public file, and a labelme 5 file with its image embedded and a
    mask shape (a base64 PNG region), as labelme saves one without --nodata."""
    public = _copy(PUBLIC / "labelme" / "x_anylabeling_human_pose.json", root / "human-pose.json")
    region = encode(photo_like(6, 4, seed=1, mode="1"), "PNG")
    embedded = root / "embedded.json"
    embedded.write_text(
        json.dumps(
            {
                "version": "5.4.1",
                "flags": {},
                "imagePath": "embedded.jpg",
                "imageData": base64.b64encode(encode(photo_like(20, 10, seed=2), "PNG")).decode(),
                "imageHeight": 10,
                "imageWidth": 20,
                "shapes": [
                    {
                        "label": "cat",
                        "points": [[2, 2], [12, 8]],
                        "group_id": None,
                        "shape_type": "rectangle",
                        "flags": {},
                        "mask": None,
                    },
                    {
                        "label": "dog",
                        "points": [[1, 1], [6, 4]],
                        "group_id": None,
                        "shape_type": "mask",
                        "flags": {},
                        "mask": base64.b64encode(region).decode(),
                    },
                    {
                        "label": "cat",
                        "points": [[1, 1], [9, 1], [5, 9]],
                        "group_id": 1,
                        "shape_type": "polygon",
                        "flags": {},
                        "mask": None,
                    },
                ],
            },
            indent=1,
        )
    )
    return Dataset(root, (str(root),), (public, embedded), DETECTION)


def yolo(root: Path) -> Dataset:
    """coco128.yaml over its own label files, laid out where it says (its `path` is
    ../datasets/coco128, so the dataset is the folder above the YAML's)."""
    (root / "ultralytics").mkdir()
    config = _copy(PUBLIC / "yolo" / "yaml" / "coco128.yaml", root / "ultralytics" / "coco128.yaml")
    labels = []
    for label in sorted((PUBLIC / "yolo" / "detect").glob("*.txt")):
        labels.append(_copy(label, root / "datasets/coco128/labels/train2017" / label.name))
        _jpeg(root / "datasets/coco128/images/train2017" / f"{label.stem}.jpg")
    return Dataset(root, (str(config),), (config, *labels), DETECTION)


def hf_imagefolder(root: Path) -> Dataset:
    metadata = _copy(PUBLIC / "hf" / "metadata.jsonl", root / "train" / "metadata.jsonl")
    return Dataset(root, (str(metadata),), (metadata,), DETECTION)


def kitti(root: Path) -> Dataset:
    labels = [
        _copy(file, root / "training" / "label_2" / file.name)
        for file in sorted((PUBLIC / "kitti").glob("*.txt"))
    ]
    for label in labels:
        _jpeg(root / "training" / "image_2" / f"{label.stem}.png", (10, 10))
    return Dataset(root, (str(root),), tuple(labels), DETECTION)


def open_images(root: Path) -> Dataset:
    shutil.copytree(PUBLIC / "open_images", root / "annotations")
    files = sorted((root / "annotations").glob("*.csv"))
    boxes = [str(file) for file in files if "bbox" in file.name]
    return Dataset(root, tuple(boxes), tuple(files), DETECTION)


def image_folder(root: Path) -> Dataset:
    """Class folders in split folders: the mutations rename a file or a folder."""
    for path in ("train/cat/a.jpg", "train/dog/b.jpg", "val/cat/c.png", "test/dog/d.jpg"):
        _jpeg(root / "photos" / path)
    files = sorted(path for path in (root / "photos").rglob("*") if path.is_file())
    return Dataset(root, (str(root / "photos"),), tuple(files), image_folder=True)


DATASETS: dict[str, Callable[[Path], Dataset]] = {
    "csv": csv_classification,
    "csv_detection": csv_detection,
    "od_api_csv": od_api_csv,
    "vertex_jsonl": vertex_jsonl,
    "pascal_voc": pascal_voc,
    "coco": coco,
    "coco_panoptic": coco_panoptic,
    "cvat": cvat,
    "label_studio": label_studio,
    "label_studio_relative": label_studio_relative,
    "labelme": labelme,
    "yolo": yolo,
    "hf_imagefolder": hf_imagefolder,
    "kitti": kitti,
    "open_images": open_images,
    "image_folder": image_folder,
}


# --- reading as the pipeline reads ------------------------------------------------------


def read_everything(dataset: Dataset) -> list:
    """What the launcher checks and the workers read, in their order; [] where the
    launcher refuses the input with a ManifestError."""
    try:
        if dataset.image_folder:
            sources = [ManifestSource(dataset.arguments[0], IMAGE_FOLDER)]
        else:
            sources = find_manifests(list(dataset.arguments), dataset.input_format)
            check_sources(sources, dataset.rules)
            class_declarations(sources)
        return [item for source in sources for item in read_source(source, dataset.rules)]
    except ManifestError:
        return []


def paths_of(item) -> list[str]:
    """The files a row names: its image, its segmentation map."""
    if isinstance(item, ManifestRow):
        return [path for path in (item.uri, item.segmentation) if path]
    return []


def inside(path: str, root: Path) -> bool:
    if "://" in path:
        return False
    real = os.path.realpath(path)
    return real == str(root) or real.startswith(str(root) + os.sep)


def assert_reads_safely(dataset: Dataset) -> None:
    tracemalloc.start()
    try:
        with touched() as events:
            try:
                items = read_everything(dataset)
            except RecursionError as error:  # in one line, not a thousand frames
                pytest.fail(f"RecursionError reading the dataset: {error}", pytrace=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < MEMORY_CAP, f"reading took {peak / 2**20:.0f} MiB"
    root = dataset.root.resolve()
    for item in items:
        assert isinstance(item, (ManifestRow, DeadLetter, DiscardedRow)), item
        if isinstance(item, DeadLetter):
            assert item.reason in REGISTRY, item
        if not dataset.rows_name_any_path:
            outside = [path for path in paths_of(item) if not inside(path, root)]
            assert not outside, f"a row names {outside} outside the dataset: {item}"
    acted = [(event, what) for event, what in events if event not in _EVENTS_READ]
    assert not acted, f"reading wrote or ran something: {acted}"
    outside = sorted(
        {path for _, path in events if not _is_runtime(path) and not inside(path, root)}
    )
    assert not outside, f"reading opened or listed {outside} outside the dataset"


@pytest.fixture(scope="module")
def warmed() -> set[str]:
    """Formats whose pristine dataset was read once: lazy imports (Beam's filesystems,
    Pillow's plugins) happen then, outside the measured readings."""
    return set()


@pytest.fixture
def dataset(request, tmp_path, warmed) -> Dataset:
    (tmp_path / "dataset").mkdir()
    made = DATASETS[request.param](tmp_path / "dataset")
    if request.param not in warmed:
        read_everything(made)
        warmed.add(request.param)
    return made


@contextlib.contextmanager
def replaced(path: Path, data: bytes) -> Iterator[None]:
    """`path` holds `data` for the block, then its own bytes again."""
    original = path.read_bytes()
    path.write_bytes(data)
    try:
        yield
    finally:
        path.write_bytes(original)


# --- mutations --------------------------------------------------------------------------


@st.composite
def byte_mutations(draw, data: bytes) -> bytes:
    """One to three flips, cuts and insertions of random bytes."""
    for _ in range(draw(st.integers(1, 3))):
        place = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(("flip", "cut", "insert", "delete")))
        if kind == "flip" and place < len(data):
            bit = 1 << draw(st.integers(0, 7))
            data = data[:place] + bytes([data[place] ^ bit]) + data[place + 1 :]
        elif kind == "cut":
            data = data[:place]
        elif kind == "insert":
            data = data[:place] + draw(st.binary(min_size=1, max_size=16)) + data[place:]
        else:
            data = data[:place] + data[place + draw(st.integers(1, 64)) :]
    return data


class Nesting(NamedTuple):
    """Lists in lists, `depth` deep: written as text (`[[[...]]]`), as the encoders
    themselves recurse."""

    depth: int

    @property
    def text(self) -> str:
        return "[" * self.depth + "]" * self.depth


# Hostile values by family. Huge numbers are beyond any allocation (a declared size of
# 10**12 cannot be allocated, so a reader that tries fails at once instead of taking the
# machine): what the fuzzing looks for is the traceback.
HOSTILE = {
    "numbers": st.sampled_from(
        [10**12, 2**63, 10**30, 1e308, -1, -(10**12), -1e308, 0, 0.5, float("inf"), float("nan")]
    ),
    "nesting": st.just(Nesting(3000)),  # well past Python's recursion limit (1000)
    "long_strings": st.sampled_from([1 << 12, 1 << 15]).map(lambda size: "x" * size),
    "paths": st.sampled_from(
        [
            "../../../../../../etc/passwd",
            "/etc/passwd",
            "../outside.jpg",
            "..",
            "/",
            "a/../../../b.jpg",
            "C:\\Windows\\win.ini",
            "file:///etc/passwd",
            "~/x.jpg",
        ]
    ),
    "types": st.sampled_from(
        [None, True, "text", "", {}, [], [[]], {"a": None}, [1, "b"], "1e9", "-1", "nan"]
    ),
}


_NESTING_MARK = "nesting-mark-2f7c"


def _with_nesting(write: Callable[[object], bytes], value: object, nesting: Nesting) -> bytes:
    """`value` written, the marked place holding `nesting` (JSON and YAML flow alike)."""
    marked = write(value).decode()
    return marked.replace(f'"{_NESTING_MARK}"', nesting.text).encode()


class Tree(NamedTuple):
    """A file read by its structure, and how it is written back."""

    value: object
    write: Callable[[object], bytes]


def _parsed(path: Path, data: bytes) -> Tree | None:
    name = path.name.lower()
    if name.endswith(".json"):
        return Tree(json.loads(data), lambda value: json.dumps(value).encode())
    if name.endswith(".jsonl"):
        return Tree(
            [json.loads(line) for line in data.splitlines() if line.strip()],
            lambda lines: b"".join(json.dumps(line).encode() + b"\n" for line in lines),
        )
    if name.endswith((".yaml", ".yml")):
        return Tree(
            yaml.safe_load(data),
            lambda value: yaml.safe_dump(value, default_style='"', width=1 << 30).encode(),
        )
    return None


def _places(value: object, at: tuple = ()) -> list[tuple]:
    """Every place in a JSON-like value: its keys' and items' paths."""
    places = [at]
    if isinstance(value, dict):
        for key, item in value.items():
            places += _places(item, (*at, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            places += _places(item, (*at, index))
    return places


def _put(value: object, at: tuple, new: object) -> object:
    if not at:
        return new
    head, *rest = at
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[head] = _put(value[head], tuple(rest), new)
    return copy


def _as_text(value: object) -> str:
    """A hostile value where the file holds text (XML, a line's field)."""
    if isinstance(value, Nesting):  # brackets: the text's own nesting
        return value.text
    return "" if value is None else str(value)


def _xml_with(data: bytes, place: int, family: str, value: object) -> bytes:
    root = ElementTree.fromstring(data)
    elements = list(root.iter())
    element = elements[place % len(elements)]
    if isinstance(value, Nesting):  # elements in elements, as text: tostring recurses
        element.text = _NESTING_MARK
        tag = element.tag
        return ElementTree.tostring(root).replace(
            _NESTING_MARK.encode(),
            f"<{tag}>".encode() * value.depth + f"</{tag}>".encode() * value.depth,
        )
    if element.attrib and place % 2:
        key = sorted(element.attrib)[place // 2 % len(element.attrib)]
        element.set(key, _as_text(value))
    else:
        element.text = _as_text(value)
    return ElementTree.tostring(root)


def _fields_with(data: bytes, line_place: int, field_place: int, value: object) -> bytes:
    """A line-based file (CSV, YOLO or KITTI labels, lists) with one field replaced."""
    lines = data.decode("utf-8", "surrogateescape").splitlines()
    if not lines:
        return _as_text(value).encode()
    number = line_place % len(lines)
    separator = "," if "," in lines[number] else " "
    fields = lines[number].split(separator)
    fields[field_place % len(fields)] = _as_text(value).replace("\n", " ")
    lines[number] = separator.join(fields)
    return "\n".join(lines).encode("utf-8", "surrogateescape") + b"\n"


# What names a file in an annotation: a word with a slash, or with an image's or a list's
# suffix (`img0.jpg`, `images/train2017`, `/data/local-files/?d=x.jpg`).
_NAMED_PATH = re.compile(
    rb"[^\s\"'<>=,:]*(?:/[^\s\"'<>=,]*|\.(?:jpe?g|png|bmp|gif|tiff?|webp|txt)\b)", re.I
)


def _path_with(path: Path, data: bytes, place: int, value: str) -> bytes | None:
    """`data` with one of the paths it names replaced by `value` (escaped as the file's
    syntax needs), or None where it names none."""
    found = list(_NAMED_PATH.finditer(data))
    if not found:
        return None
    named = found[place % len(found)]
    suffix = path.suffix.lower()
    text = (
        json.dumps(value)[1:-1]
        if suffix in (".json", ".jsonl")
        else xml_escape(value, {'"': "&quot;"})
        if suffix == ".xml"
        else value
    )
    return data[: named.start()] + text.encode() + data[named.end() :]


@st.composite
def structure_mutations(draw, path: Path, data: bytes, family: str) -> bytes:
    """`data` with one value replaced by a hostile one of `family`; a path, where the file
    names one, in place of a path it names (a random place would seldom be one)."""
    value = draw(HOSTILE[family])
    if family == "paths":
        named = _path_with(path, data, draw(st.integers(0, 10**6)), value)
        if named is not None:
            return named
    if path.suffix.lower() == ".xml":
        return _xml_with(data, draw(st.integers(0, 10**6)), family, value)
    tree = _parsed(path, data)
    if tree is None:
        return _fields_with(data, draw(st.integers(0, 10**6)), draw(st.integers(0, 50)), value)
    # A JSON Lines file is its lines: one of them changes, never the file's list itself.
    at = draw(
        st.sampled_from([at for at in _places(tree.value) if at or path.suffix.lower() != ".jsonl"])
    )
    if isinstance(value, Nesting):
        if path.suffix.lower() in (".yaml", ".yml"):
            # PyYAML takes a Python frame or three a level, and its scanner time grows
            # with the square of the depth: 400 levels pass the recursion limit in ~0.2 s.
            value = Nesting(400)
        return _with_nesting(tree.write, _put(tree.value, at, _NESTING_MARK), value)
    return tree.write(_put(tree.value, at, value))


# --- the tests --------------------------------------------------------------------------

# No shrinking: a failure's example is reported as found (shrinking a slow reader's
# failure would take minutes of CI).
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)


STRUCTURED = sorted(set(DATASETS) - {"image_folder"})
CASES = [
    pytest.param(name, family, id=f"{name}-{family}") for name in STRUCTURED for family in HOSTILE
]


@pytest.mark.parametrize("dataset", STRUCTURED, indirect=True)
@FUZZ
@given(data=st.data())
def test_byte_mutations_of_every_format_fail_only_as_documented(dataset, data):
    target = data.draw(st.sampled_from(dataset.targets), label="file")
    with replaced(target, data.draw(byte_mutations(target.read_bytes()), label="bytes")):
        assert_reads_safely(dataset)


@pytest.mark.parametrize("dataset,family", CASES, indirect=["dataset"])
@FUZZ
@given(data=st.data())
def test_hostile_values_in_every_format_fail_only_as_documented(dataset, family, data):
    target = data.draw(
        st.sampled_from([path for path in dataset.targets if path.suffix.lower() != ".png"]),
        label="file",
    )
    mutated = data.draw(structure_mutations(target, target.read_bytes(), family), label="mutated")
    with replaced(target, mutated):
        assert_reads_safely(dataset)


# Names a file system takes: anything but "/" and NUL (and the names "." and "..").
FILE_NAMES = st.text(
    st.characters(exclude_categories=("Cs",), exclude_characters="/\x00"), min_size=1, max_size=80
).filter(lambda name: name not in (".", "..") and len(name.encode()) < 250)


@pytest.mark.parametrize("dataset", ["image_folder"], indirect=True)
@FUZZ
@given(data=st.data())
def test_any_names_in_an_image_folder_fail_only_as_documented(dataset, data):
    """An image folder's data is its names: a file or a class folder renamed to any name
    (spaces, dots, `..` inside, control characters, any script) reads as the others do."""
    photos = Path(dataset.arguments[0])
    target = data.draw(st.sampled_from([*dataset.targets, photos / "train" / "cat"]))
    renamed = target.with_name(data.draw(FILE_NAMES, label="name"))
    assume(not renamed.exists())
    target.rename(renamed)
    try:
        assert_reads_safely(dataset)
    finally:
        renamed.rename(target)


def test_the_measures_see_what_a_reading_opens_writes_and_runs(tmp_path):
    """The audit hook is what the fuzz tests trust: it sees an open, a listing, a write
    and a program started."""
    outside = tmp_path / "elsewhere.jpg"
    with touched() as events:
        outside.write_bytes(b"x")
        os.listdir(tmp_path)
        os.remove(outside)
        os.system("true")
    assert ("open", str(outside)) in events and ("os.listdir", str(tmp_path)) in events
    assert {event for event, _ in events} >= {"os.remove", "os.system"}
    assert not _is_runtime(str(outside))


# --- what the fuzzing found, kept as plain cases ------------------------------------------


@pytest.mark.parametrize(
    "cut",
    [
        b'{\n "info"',
        b'{"images": [{"id": 1}, \x80]}',
        b'{"categories": [{"id": 99999999999999999999999}]}',
    ],
)
def test_a_coco_file_that_is_no_json_is_a_manifest_error_naming_it(tmp_path, cut):
    """Cut off, a stray byte, a number past 64 bits: ijson's own error was a traceback,
    in the launcher (the categories) and in the workers (the rows)."""
    path = tmp_path / "instances.json"
    path.write_bytes(cut)
    source = ManifestSource(str(path), "coco")
    with pytest.raises(ManifestError, match=f"{path}: not JSON"):
        class_declarations([source])
    with pytest.raises(ManifestError, match=f"{path}: not JSON"):
        list(read_source(source, DETECTION))


def test_a_voc_image_set_list_that_is_no_text_is_a_manifest_error_naming_it(tmp_path):
    dataset = pascal_voc(tmp_path)
    image_set = tmp_path / "voc" / "VOC2007" / "ImageSets" / "Main" / "train.txt"
    image_set.write_bytes(b"\x80" + image_set.read_bytes())
    with pytest.raises(ManifestError, match=f"{image_set} is not UTF-8 text"):
        list(read_everything_raising(dataset))


def read_everything_raising(dataset: Dataset) -> list:
    sources = find_manifests(list(dataset.arguments), dataset.input_format)
    check_sources(sources, dataset.rules)
    return [item for source in sources for item in read_source(source, dataset.rules)]


def test_a_label_studio_export_that_is_no_json_is_a_manifest_error_naming_it(tmp_path):
    path = tmp_path / "tasks.json"
    path.write_bytes((PUBLIC / "label_studio" / "rect_poly_coco_data.json").read_bytes()[:300])
    with pytest.raises(ManifestError, match=f"{path}: not JSON"):
        list(read_source(ManifestSource(str(path), "label_studio"), DETECTION))


@pytest.mark.parametrize(
    "task,reason",
    [
        ({"data": {"image": "a.jpg"}, "annotations": 7}, "malformed_row"),
        (
            {
                "data": {"image": "a.jpg"},
                "annotations": [{"result": [{"type": "choices", "value": ["cat"]}]}],
            },
            "missing_label",
        ),
        (
            {
                "data": {"image": "a.jpg"},
                "annotations": [{"result": [{"type": "choices", "value": {"choices": 3}}]}],
            },
            "missing_label",
        ),
    ],
)
def test_label_studio_values_of_the_wrong_type_are_dead_letters(tmp_path, task, reason):
    """They were TypeErrors and AttributeErrors: the whole job's traceback."""
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps([task]))
    (dead,) = read_source(ManifestSource(str(path), "label_studio"), RowRules())
    assert (dead.line, dead.reason) == (1, reason)


@pytest.mark.parametrize(
    "line,reason",
    [
        ({"imageGcsUri": "a.jpg", "classificationAnnotations": 7}, "missing_label"),
        (
            {
                "imageGcsUri": "a.jpg",
                "classificationAnnotation": {"displayName": "cat"},
                "dataItemResourceLabels": "training",
            },
            None,
        ),
    ],
)
def test_vertex_values_of_the_wrong_type_are_dead_letters_or_ignored(tmp_path, line, reason):
    path = tmp_path / "manifest.jsonl"
    path.write_text(json.dumps(line) + "\n")
    (item,) = read_source(ManifestSource(str(path), "vertex_jsonl"), RowRules())
    assert getattr(item, "reason", None) == reason


@pytest.mark.parametrize("key", ["image_id", "category_id"])
def test_a_coco_annotation_whose_ids_are_lists_is_a_dead_letter(tmp_path, key):
    dataset = coco(tmp_path)
    instances = json.loads(dataset.targets[0].read_text())
    instances["annotations"][0][key] = [1]
    dataset.targets[0].write_text(json.dumps(instances))
    items = list(read_source(ManifestSource(str(dataset.targets[0]), "coco"), DETECTION))
    assert [(item.line, item.reason) for item in items if isinstance(item, DeadLetter)] == [
        (1, "unknown_image_id" if key == "image_id" else "unknown_category_id")
    ]


def test_a_panoptic_segment_whose_id_is_a_list_has_no_pixels(tmp_path):
    dataset = coco_panoptic(tmp_path)
    annotations = json.loads(dataset.targets[0].read_text())
    annotations["annotations"][0]["segments_info"][0]["id"] = []  # numpy broadcast it
    dataset.targets[0].write_text(json.dumps(annotations))
    reasons = [
        item.reason
        for item in read_source(ManifestSource(str(dataset.targets[0]), "coco_panoptic"), DETECTION)
        if isinstance(item, DeadLetter)
    ]
    assert reasons == ["invalid_mask"]


def test_labelme_shapes_whose_group_id_is_a_list_are_objects_of_their_own(tmp_path):
    dataset = labelme(tmp_path)
    embedded = json.loads(dataset.targets[1].read_text())
    for shape in embedded["shapes"]:
        shape["group_id"] = [1]
    dataset.targets[1].write_text(json.dumps(embedded))
    rows = [
        item
        for item in read_source(ManifestSource(str(dataset.targets[1]), "labelme"), DETECTION)
        if isinstance(item, ManifestRow)
    ]
    assert [row.labels for row in rows] == [("cat",), ("dog",), ("cat",)]


def test_a_panoptic_segment_whose_category_id_is_a_list_names_no_category(tmp_path):
    dataset = coco_panoptic(tmp_path)
    annotations = json.loads(dataset.targets[0].read_text())
    annotations["annotations"][0]["segments_info"][0]["category_id"] = [1]
    dataset.targets[0].write_text(json.dumps(annotations))
    reasons = [
        item.reason
        for item in read_source(ManifestSource(str(dataset.targets[0]), "coco_panoptic"), DETECTION)
        if isinstance(item, DeadLetter)
    ]
    assert reasons == ["unknown_category_id"]


@pytest.mark.parametrize(
    "build,target,written,outside",
    [
        (pascal_voc, 0, "<filename>cat/", "<filename>../../../../../../etc/"),
        (cvat, 0, 'name="img0.jpg"', 'name="../../../../../../etc/passwd"'),
        (hf_imagefolder, 0, '"file_name": "', '"file_name": "../../../../../../etc/'),
    ],
)
def test_an_image_named_outside_the_annotations_root_is_never_a_row(
    tmp_path, build, target, written, outside
):
    """VOC's <filename>, CVAT's <image name> and a Hugging Face metadata file_name of
    `../../..` give rows whose image is in /etc."""
    dataset = build(tmp_path)
    path = dataset.targets[target]
    text = path.read_text()
    assert written in text
    path.write_text(text.replace(written, outside, 1))
    assert_reads_safely(dataset)


# --- an earlier output's example index: what --reuse_from routes and `diff` compares ------

_INDEXED_SHARD = "train-00000-of-00001.tfrecord"


@pytest.fixture(scope="module")
def indexed_outputs(tmp_path_factory) -> tuple[str, str, Path]:
    """Two outputs as summary.json and an example index each (what `diff` reads), and the
    second's index, which the tests mutate."""
    from image_tfrecords.core.records import naming
    from image_tfrecords.core.records.example_index import IndexEntry, write_index

    root = tmp_path_factory.mktemp("indexes")
    folders = []
    for name, labels in (("old", ("cat",)), ("new", ("dog", "cat"))):
        folder = root / name
        folder.mkdir()
        summary = {
            "options": {"dedupe": "none"},
            "rows_read": 3,
            "examples_written": 3,
            "rows_in_examples": 3,
            "rows_dead_lettered": 0,
            "accounted": True,
            "error_fraction": 0.0,
            "splits": {"train": {"shards": [{"file": _INDEXED_SHARD, "records": 3, "bytes": 9}]}},
            "vocabulary": {"label": ["cat", "dog"]},
        }
        (folder / naming.SUMMARY_FILE).write_text(json.dumps(summary))
        write_index(
            naming.published_index(str(folder), _INDEXED_SHARD),
            (
                IndexEntry(
                    position=position,
                    uri=str(root / "images" / f"{position}.jpg"),
                    split="train",
                    labels=labels,
                    sha256=f"{position:064x}",
                    perceptual_hash=position,
                    source_bytes=100,
                    reencoded=None,
                    longest_side=32,
                    identity=f"local:100:{position}:1:2",
                    key=f"key{position}",
                )
                for position in range(3)
            ),
        )
        folders.append(str(folder))
    old, new = folders
    from image_tfrecords.core.report.changes import output_changes

    assert output_changes(old, new).relabelled.count == 3  # unmutated, they compare
    return old, new, Path(naming.published_index(new, _INDEXED_SHARD))


def assert_index_read_safely(old: str, new: str, index: Path) -> None:
    """`diff`'s comparison and --reuse_from's routing of the index: only their documented
    failures, and memory of a bounded reading."""
    from image_tfrecords.core.records.example_index import ExampleIndexError, PreviousShardFiles
    from image_tfrecords.core.report.changes import NotComparable, output_changes
    from image_tfrecords.core.storage.filesystem_options import FilesystemOptions
    from image_tfrecords.core.worker.shard_writer import SplitPlan
    from image_tfrecords.transforms.previous_examples import _Route

    tracemalloc.start()
    try:
        with contextlib.suppress(NotComparable, ExampleIndexError):
            output_changes(old, new)
        files = PreviousShardFiles(str(index), str(index.parent / _INDEXED_SHARD), "t")
        for _, (_, previous) in _Route(FilesystemOptions()).process(
            files, {"train": SplitPlan(2, 2)}
        ):
            assert all(entry.labels == () for entry in previous.unpacked())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < MEMORY_CAP


@FUZZ
@given(data=st.data())
def test_byte_mutations_of_an_example_index_fail_only_as_documented(indexed_outputs, data):
    old, new, index = indexed_outputs
    with replaced(index, data.draw(byte_mutations(index.read_bytes()), label="bytes")):
        assert_index_read_safely(old, new, index)


@pytest.mark.parametrize("family", HOSTILE)
@FUZZ
@given(data=st.data())
def test_hostile_values_in_an_example_index_fail_only_as_documented(indexed_outputs, family, data):
    old, new, index = indexed_outputs
    mutated = data.draw(structure_mutations(index, index.read_bytes(), family), label="index")
    with replaced(index, mutated):
        assert_index_read_safely(old, new, index)
