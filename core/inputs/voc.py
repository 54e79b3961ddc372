"""Pascal VOC annotation XMLs (VOCdevkit's Annotations/, or labelImg's XML beside each
image): one detection row per <object>, boxes normalised as create_pascal_tf_record.py does.

Splits: in the VOCdevkit layout (XMLs in ROOT/Annotations/), ROOT/ImageSets/Main/
{train,val,test}.txt (or a subset's own name, Train.txt, Validation.txt: datumaro's and
CVAT's project exports) list the image ids of each split, and an XML no list names is left
out, as create_pascal_tf_record.py and TFDS leave it out (they read only listed ids);
without those lists every image gets the --manifest SPLIT=PATH split, or one from a hash
of its file name. With SPLIT=PATH and the lists, only that split's list is read.
Images: ROOT/JPEGImages/<filename> in the VOCdevkit layout, else beside the XML, or under
--image_dir, and inside ROOT, the XML's folder or --image_dir
(core/inputs/dataset_root.py). An image whose XML says <segmented>1</segmented> has its
segmentation map, ROOT/SegmentationClass/<id>.png, written as DeepLab's
build_voc2012_data writes it: a palette's indices, or an RGB map's colours through the
root's labelmap.txt (`name:r,g,b:...`, background index 0: CVAT's and datumaro's VOC
exports), a colour no class has an invalid_mask naming it.
A labelmap.txt or labels.txt beside the XMLs declares the classes (declared_class_list).
"""

from __future__ import annotations

import logging
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator

from image_tfrecords.core.inputs.boxes import declared_size, pixel_box
from image_tfrecords.core.inputs.dataset_root import DatasetRoot, quoted
from image_tfrecords.core.inputs.input_format import DeclaredClasses, FileHead, InputFormat, is_glob
from image_tfrecords.core.inputs.lines import whole_lines
from image_tfrecords.core.inputs.rows import (
    ManifestError,
    RowRules,
    assign_split,
    has_undecodable_bytes,
    printable,
)
from image_tfrecords.core.records import dead_letters as reasons
from image_tfrecords.core.records import documents
from image_tfrecords.core.records.choices import LeftOut
from image_tfrecords.core.records.chunks import LineRange, ManifestSource
from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.records import Box, ManifestRow
from image_tfrecords.core.records.splits import normalise_split
from image_tfrecords.core.storage import storage

ANNOTATIONS = "Annotations"
_IMAGES = "JPEGImages"
_SEGMENTATION = "SegmentationClass"  # VOC2012's maps: palette PNGs of class indices
_FLAGS = {"0": 0, "1": 1}
# The class lists written beside VOC annotations: datumaro's and CVAT's VOC exports write
# labelmap.txt (`name:color:parts:actions` a line, background first); labels.txt holds a
# name a line.
_CLASS_LISTS = ("labelmap.txt", "labels.txt")
_BACKGROUND = ("background", "__background__")  # VOC's class index 0, no object's class
_MAP_CLASSES = 256  # a segmentation map's PNG holds a class index a byte


def xml_glob(path: str) -> str | None:
    """The annotation XMLs `path` names: a glob or file ending in .xml, a folder of XMLs,
    or a VOCdevkit year folder (ROOT/Annotations/*.xml); None when it names none of these."""
    if path.lower().endswith(".xml"):
        return path
    if any(char in path.rstrip("/").rsplit("/", 1)[-1] for char in ".*?["):
        return None  # a file name or a glob: some other manifest
    for pattern in (storage.join(path, "*.xml"), storage.join(path, ANNOTATIONS, "*.xml")):
        if storage.match(pattern):
            return pattern
    return None


def check_voc(pattern: str, split: str | None) -> None:
    """Before the job: SPLIT=PATH on a VOCdevkit tree with ImageSets lists needs that
    split's list (otherwise every XML, of any split, would get SPLIT); a labelmap.txt
    whose colours cannot be read is refused."""
    root = _devkit_root(storage.split(pattern)[0])
    if root is not None:
        labelmap_colours(root)  # refused before the job where it cannot be read
    if split is None or root is None:
        return
    lists = _split_lists(root)
    if lists and split not in lists:
        present = sorted(storage.split(path)[1] for paths in lists.values() for path in paths)
        raise ManifestError(
            f"{storage.join(root, 'ImageSets', 'Main')} has no list of {split} for --manifest "
            f"{split.upper()}=...; it lists {', '.join(present)}"
        )


def read_voc(
    pattern: str, rules: RowRules, split: str | None
) -> Iterator[ManifestRow | DeadLetter]:
    """Every XML `pattern` matches, in path order: a row per object (an XML without
    objects: an image without objects), or a DeadLetter naming the file and the reason."""
    image_sets: dict[str, dict[str, str] | None] = {}  # by VOCdevkit root, each read once
    colours: dict[str, tuple[tuple[int, int, int], ...] | None] = {}  # likewise
    skipped = 0
    for metadata in sorted(storage.match(pattern), key=lambda found: found.path):
        path = metadata.path
        folder, name = storage.split(path)
        root = _devkit_root(folder)
        if root is not None and root not in image_sets:
            image_sets[root] = _read_image_sets(root, split)
        listed = image_sets.get(root) if root is not None else None
        image_id = name.rsplit(".", 1)[0]
        if listed is not None and image_id not in listed:
            skipped += 1
            continue
        dataset = DatasetRoot.of(path, rules, root)
        images = rules.image_dir or (storage.join(root, _IMAGES) if root else folder)
        maps = (
            storage.join(root, _SEGMENTATION)
            if root is not None and LeftOut.SEGMENTATION not in rules.leave_out
            else None
        )
        if maps and root not in colours:
            colours[root] = labelmap_colours(root)
        yield from _xml_rows(
            path,
            dataset,
            images,
            maps,
            listed[image_id] if listed else split,
            rules,
            colours.get(root) if maps else None,
        )
    if skipped:
        logging.warning(
            "%s: %d annotation XMLs are in no ImageSets/Main list and were left out",
            pattern,
            skipped,
        )


def declared_class_list(pattern: str) -> DeclaredClasses | None:
    """The classes of a labelmap.txt or labels.txt in the XMLs' folder or the VOCdevkit
    root above it, in their order. A first class named background is VOC's index 0,
    which is the Object Detection API's background too: the class after it gets class
    label 1 (as in the API's pascal_label_map.pbtxt). None where there is no such file;
    ManifestError for two that differ."""
    folder = storage.split(pattern)[0]
    folders = dict.fromkeys(filter(None, (folder, _devkit_root(folder))))
    found = [
        _read_class_list(path)
        for each in folders
        for name in _CLASS_LISTS
        if storage.exists(path := storage.join(each, name))
    ]
    if len({declared.labels for declared in found}) > 1:
        raise ManifestError(
            f"{found[0].declared_by} and {found[1].declared_by} list different classes: keep one"
        )
    return found[0] if found else None


def labelmap_colours(folder: str) -> tuple[tuple[int, int, int], ...] | None:
    """The colour of each class index in the labelmap.txt at `folder` (`name:r,g,b:...` a
    line, background first: index 0), as CVAT's and datumaro's VOC exports draw their RGB
    segmentation maps; None without one. ManifestError for a colour that is not r,g,b or
    that two classes share (a pixel of it would be both)."""
    path = storage.join(folder, _CLASS_LISTS[0])
    if not storage.exists(path):
        return None
    colours: dict[tuple[int, int, int], str] = {}
    for number, line in whole_lines(path):
        if line.lstrip().startswith("#"):
            continue
        name, _, rest = line.partition(":")
        written = rest.split(":", 1)[0].strip()
        try:
            parts = [int(part) for part in written.split(",")]
        except ValueError:
            parts = []
        if len(parts) != 3 or not all(0 <= part <= 255 for part in parts):
            raise ManifestError(
                f"{path} line {number}: the colour of {name.strip()!r} is not r,g,b: {written!r}"
            )
        colour = (parts[0], parts[1], parts[2])
        if colour in colours:
            raise ManifestError(
                f"{path} line {number}: {name.strip()!r} has {colours[colour]!r}'s colour {written}"
            )
        colours[colour] = name.strip()
    if len(colours) > _MAP_CLASSES:
        raise ManifestError(
            f"{path}: {len(colours)} classes, a segmentation map holds {_MAP_CLASSES}"
        )
    return tuple(colours) or None


def _read_class_list(path: str) -> DeclaredClasses:
    names = [
        line.split(":", 1)[0].strip() if path.endswith("labelmap.txt") else line.strip()
        for _, line in whole_lines(path)
        if not line.lstrip().startswith("#")
    ]
    if names and names[0].lower() in _BACKGROUND:
        names = names[1:]
    return DeclaredClasses(path, tuple(names))


def _devkit_root(folder: str) -> str | None:
    parent, name = storage.split(folder)
    return parent if name == ANNOTATIONS else None


def _read_image_sets(root: str, split: str | None) -> dict[str, str] | None:
    """Image id -> split from ROOT/ImageSets/Main's lists (only `split`'s when given), or
    None when there is no list to read."""
    lists = _split_lists(root)
    found: dict[str, str] = {}
    for name, path in (
        (name, path) for name, paths in lists.items() if split in (None, name) for path in paths
    ):
        for number, line in whole_lines(path):
            if has_undecodable_bytes(line):  # an id no XML's name can match
                raise ManifestError(
                    f"{path} is not UTF-8 text: line {number} is {printable(line)!r}"
                )
            found.setdefault(line.split()[0], name)
    return found if lists else None


def _split_lists(root: str) -> dict[str, list[str]]:
    """Split -> ROOT/ImageSets/Main's lists of it, in name order: each list whose name is
    a split's (train.txt, val.txt, test.txt; a subset's own name as datumaro and CVAT
    write a project's, Train.txt or Validation.txt), as datumaro's VOC importer reads
    them. `default.txt` (CVAT's task without a subset), `trainval.txt` and per-class
    lists (`cat_train.txt`) name no split."""
    lists: dict[str, list[str]] = {}
    pattern = storage.join(root, "ImageSets", "Main", "*.txt")
    for path in sorted(found.path for found in storage.match(pattern)):
        split = normalise_split(storage.split(path)[1].removesuffix(".txt"))
        if split is not None:
            lists.setdefault(split, []).append(path)
    return lists


def _xml_rows(
    path: str,
    dataset: DatasetRoot,
    images: str,
    maps: str | None,
    split: str | None,
    rules: RowRules,
    colours: tuple[tuple[int, int, int], ...] | None = None,
) -> Iterator[ManifestRow | DeadLetter]:
    """The XML's rows; with `maps` (ROOT/SegmentationClass) and <segmented>1</segmented>,
    the image's segmentation map is maps/<the XML's name>.png, drawn in `colours` where
    labelmap.txt gives them (an RGB map's) or in class indices."""
    try:
        with storage.open_read(path) as file:
            annotation = documents.parse_xml(file.read())
    except (OSError, ElementTree.ParseError, documents.DocumentError) as error:
        yield DeadLetter.in_file(
            path, reasons.INVALID_ANNOTATION, f"cannot parse the XML: {error}", split=split or ""
        )
        return
    filename = (annotation.findtext("filename") or "").strip()
    size = declared_size(annotation.findtext("size/width"), annotation.findtext("size/height"))
    split = split or assign_split(filename, rules.split_fractions)
    if not filename or annotation.find("size") is None:
        yield DeadLetter.in_file(
            path, reasons.INVALID_ANNOTATION, "the XML has no <filename> or no <size>", split=split
        )
        return
    image = ManifestRow(
        path, 0, filename, split, dataset.resolve(filename, images), (), listed_whole=True
    )
    outside = dataset.outside(image.uri, f"<filename> {quoted(filename)}")
    if outside:
        yield image.dead_letter(*outside)
        return
    if not isinstance(size[0], int):
        yield image.dead_letter(*size)
        return
    image = image._replace(image_size=size)
    if maps and (annotation.findtext("segmented") or "").strip() == "1":
        stem = storage.split(path)[1].rsplit(".", 1)[0]
        image = image._replace(
            segmentation=storage.join(maps, f"{stem}.png"), segmentation_colours=colours
        )
    objects = annotation.findall("object")
    if not objects:
        yield image
    for position, element in enumerate(objects, start=1):
        raw = ElementTree.tostring(element, encoding="unicode").strip()
        yield _object_row(image._replace(line=position, raw=raw), element)


def _object_row(image: ManifestRow, element: ElementTree.Element) -> ManifestRow | DeadLetter:
    where = f"object {image.line}: "
    label = (element.findtext("name") or "").strip()
    if not label:
        return image.dead_letter(reasons.MISSING_LABEL, where + "<name> is missing or empty")
    flags = {
        flag: _FLAGS.get((element.findtext(flag) or "0").strip())
        for flag in ("difficult", "truncated")
    }
    if None in flags.values():
        return image.dead_letter(
            reasons.INVALID_BOX, where + "<difficult> and <truncated> must be 0 or 1"
        )
    corners = [element.findtext(f"bndbox/{side}") for side in ("xmin", "ymin", "xmax", "ymax")]
    box = pixel_box(corners, image.image_size, **flags)
    if not isinstance(box, Box):
        return image.dead_letter(box[0], where + box[1])
    return image._replace(labels=(label,), boxes=(box,))


class VocFormat(InputFormat):
    """An XML file, or a glob of them (xml_glob: a folder or a VOCdevkit year folder)."""

    name = "pascal_voc"
    title = "Pascal VOC annotation XML"
    suffixes = (".xml",)
    in_worker = False
    boxes_only = True
    folder_files = "VOC XML"

    def recognises(self, head: FileHead) -> bool:
        return head.xml_root == "annotation"

    def annotation_glob(self, path: str, chosen: bool) -> str | None:
        """A folder of XMLs, a VOCdevkit year folder or a glob; one XML file is sniffed as
        any other (a CVAT XML is one file too)."""
        glob = xml_glob(path)
        return glob if glob and (glob != path or is_glob(path)) else None

    def check_file(self, source: ManifestSource, rules: RowRules) -> None:
        check_voc(source.path, source.split)

    def declared_classes(self, source: ManifestSource) -> DeclaredClasses | None:
        return declared_class_list(source.path)

    def read(
        self, source: ManifestSource, rules: RowRules, lines: LineRange | None
    ) -> Iterator[ManifestRow | DeadLetter]:
        return read_voc(source.path, rules, source.split)
