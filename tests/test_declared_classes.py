"""Declared classes are the vocabulary (pipeline/run.py, each format's declared_classes):
where the input declares its classes (YOLO's names, COCO's categories, CVAT's <labels>,
a Hugging Face ClassLabel, VOC's labelmap.txt), those classes and their ids are the
output's on every split, through tf.Transform as a pinned --vocabulary is; a label
outside them is a dead letter naming the declaration; --vocabulary overrides them."""

import json
import shutil
import textwrap
from pathlib import Path

import pytest
import yaml as pyyaml

from conftest import encode, parse_label_map, photo_like, read_examples, voc_annotation
from pipeline import run
from worker.inputs.rows import ManifestError
from worker.inputs.sources import declared_classes, find_manifests

PUBLIC = Path(__file__).parent / "data" / "public"
COCO_NAMES = tuple(pyyaml.safe_load((PUBLIC / "yolo" / "yaml" / "coco128.yaml").read_text())
                   ["names"].values())


def image(path, seed=0, size=(64, 48)):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode(photo_like(*size, seed), "JPEG"))
    return path


def write(path, content):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(content).lstrip())
    return path


def convert(manifest, output, *flags):
    """The command line's exit status; the output's summary.json, examples by file name,
    label map (id -> name) and dead letters."""
    status = run.main(["--manifest", str(manifest), "--label_mode", "detection",
                       "--output_dir", str(output), *flags])
    summary = json.loads((output / "summary.json").read_text())
    examples = {example.features.feature["image/filename"].bytes_list.value[0].decode():
                example.features.feature for example in read_examples(f"{output}/*.tfrecord")}
    letters = [json.loads(line) for errors in output.glob("errors-*.jsonl")
               for line in errors.read_text().splitlines()]
    return status, summary, examples, parse_label_map((output / "label_map.pbtxt").read_text()
                                                      ), letters


def objects(feature):
    """(class/label, class/text) of each of an example's objects."""
    return list(zip(feature["image/object/class/label"].int64_list.value,
                    (text.decode() for text in feature["image/object/class/text"].bytes_list.value),
                    strict=True))


def coco8_like(root):
    """Ultralytics' coco8 layout with coco128.yaml's 80 names: TRAIN's images hold person
    (0) and bowl (45), VAL's umbrella (25) and toothbrush (79), which TRAIN lacks."""
    labels = {("train", "a"): "0 0.5 0.5 0.5 0.4\n45 0.25 0.75 0.1 0.2\n",
              ("train", "b"): "0 0.3 0.3 0.2 0.2\n",
              ("val", "c"): "25 0.5 0.5 0.4 0.4\n79 0.2 0.2 0.1 0.1\n"}
    for seed, ((split, name), content) in enumerate(labels.items()):
        image(root / "images" / split / f"{name}.jpg", seed)
        write(root / "labels" / split / f"{name}.txt", content)
    names = "".join(f"  {class_id}: {name}\n" for class_id, name in enumerate(COCO_NAMES))
    return write(root / "coco8.yaml", "path: .\ntrain: images/train\nval: images/val\n"
                 "names:\n" + names)


def test_a_yolo_yaml_s_names_are_the_ids_on_every_split(tmp_path, capsys):
    """The issue's case: coco8 failed with half its rows unseen_label, as ids were learnt
    from TRAIN. Now every object's class/label is its YOLO id + 1 and its text the name,
    on VAL too, and the label map holds the 80 declared classes."""
    yaml = coco8_like(tmp_path / "coco8")
    status, summary, examples, label_map, letters = convert(yaml, tmp_path / "out")
    assert (status, letters) == (0, [])
    assert capsys.readouterr().out.count(
        f"label ids: the 80 classes declared by {yaml} (names)") == 1
    assert objects(examples["a.jpg"]) == [(1, "person"), (46, "bowl")]
    assert objects(examples["c.jpg"]) == [(26, "umbrella"), (80, "toothbrush")]
    assert label_map == dict(enumerate(COCO_NAMES, start=1))
    assert summary["vocabulary"]["label"] == list(COCO_NAMES)
    assert (summary["vocabulary_declared_by"], summary["vocabulary_pinned_from"]) == (
        f"{yaml} (names)", None)
    published = (tmp_path / "out" / "transform_fn" / "assets" / "label").read_text()
    assert published.splitlines() == list(COCO_NAMES)


def test_vocabulary_overrides_a_declaration_and_says_so(tmp_path, capsys):
    yaml = coco8_like(tmp_path / "coco8")
    vocabulary = write(tmp_path / "ids.txt", "bowl\nperson\numbrella\ntoothbrush\n")
    status, summary, examples, label_map, letters = convert(
        yaml, tmp_path / "out", "--vocabulary", str(vocabulary))
    assert (status, letters) == (0, [])
    assert (f"label ids: --vocabulary {vocabulary} overrides the classes declared by "
            f"{yaml} (names)") in capsys.readouterr().out
    assert objects(examples["a.jpg"]) == [(2, "person"), (1, "bowl")]
    assert label_map == {1: "bowl", 2: "person", 3: "umbrella", 4: "toothbrush"}
    assert (summary["vocabulary_declared_by"], summary["vocabulary_pinned_from"]) == (
        None, str(vocabulary))


def test_a_yaml_with_nc_alone_declares_class_0_and_on(tmp_path):
    root = tmp_path / "ds"
    image(root / "images" / "val" / "a.jpg")
    write(root / "labels" / "val" / "a.txt", "2 0.5 0.5 0.2 0.2\n")
    yaml = write(root / "data.yaml", "path: .\nval: images/val\nnc: 3\n")
    # VAL alone: without the declaration it was refused, no TRAIN row to learn ids from.
    status, summary, examples, label_map, letters = convert(yaml, tmp_path / "out")
    assert (status, letters) == (0, [])
    assert objects(examples["a.jpg"]) == [(3, "class_2")]
    assert summary["vocabulary_declared_by"] == f"{yaml} (nc)"
