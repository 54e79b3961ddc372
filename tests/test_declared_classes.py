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
from apache_beam.options.pipeline_options import PipelineOptions
from conftest import (
    before_the_job,
    encode,
    parse_label_map,
    photo_like,
    read_examples,
    voc_annotation,
)

from image_tfrecords.core.inputs.rows import ManifestError
from image_tfrecords.core.inputs.sources import class_declarations, find_manifests, one_declaration
from image_tfrecords.core.records.label_map import label_map_text
from image_tfrecords.core.records.records import ManifestRow
from image_tfrecords.pipeline import run
from image_tfrecords.pipeline.options import ConvertOptions
from image_tfrecords.pipeline.resume import scan_sources

PUBLIC = Path(__file__).parent / "data" / "public"
COCO_NAMES = tuple(
    pyyaml.safe_load((PUBLIC / "yolo" / "yaml" / "coco128.yaml").read_text())["names"].values()
)


def declared_classes(*manifests):
    """What the --manifest values declare, as one declaration (the launcher's check)."""
    return one_declaration(class_declarations(find_manifests(list(manifests))))


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
    status = run.main(
        [
            "--manifest",
            str(manifest),
            "--label_mode",
            "detection",
            "--output_dir",
            str(output),
            *flags,
        ]
    )
    summary = json.loads((output / "summary.json").read_text())
    examples = {
        example.features.feature["image/filename"]
        .bytes_list.value[0]
        .decode(): example.features.feature
        for example in read_examples(f"{output}/*.tfrecord")
    }
    letters = [
        json.loads(line)
        for errors in output.glob("errors-*.jsonl")
        for line in errors.read_text().splitlines()
    ]
    return (
        status,
        summary,
        examples,
        parse_label_map((output / "label_map.pbtxt").read_text()),
        letters,
    )


def objects(feature):
    """(class/label, class/text) of each of an example's objects."""
    return list(
        zip(
            feature["image/object/class/label"].int64_list.value,
            (text.decode() for text in feature["image/object/class/text"].bytes_list.value),
            strict=True,
        )
    )


def decided(*arguments):
    """convert's label ids and rows, decided before its job (conftest.before_the_job),
    for the findings made there; `arguments` less --label_mode detection."""
    pinned, rows = before_the_job(
        *arguments, "--label_mode", "detection", "--output_dir", "/nonexistent/out"
    )  # never written
    assert all(isinstance(row, ManifestRow) for row in rows), rows  # no dead letter
    return pinned, rows


def label_map_of(pinned):
    """The label map (id -> name) the job writes for pinned ids (label_map.pbtxt)."""
    return parse_label_map(label_map_text(pinned.labels, oov_bucket=False))


def objects_decided(pinned, rows):
    """(class/label, class/text) of each image's objects, by file name, as the job writes
    them for pinned ids: the label map's (checked on the shards by
    test_a_yolo_yaml_s_names_are_the_ids_on_every_split). A label outside the ids
    fails here, where the job would dead-letter it."""
    ids = {name: number for number, name in label_map_of(pinned).items()}
    found = {}
    for row in rows:
        found.setdefault(Path(row.uri).name, []).extend((ids[label], label) for label in row.labels)
    return found


def coco8_like(root):
    """Ultralytics' coco8 layout with coco128.yaml's 80 names: TRAIN's images hold person
    (0) and bowl (45), VAL's umbrella (25) and toothbrush (79), which TRAIN lacks."""
    labels = {
        ("train", "a"): "0 0.5 0.5 0.5 0.4\n45 0.25 0.75 0.1 0.2\n",
        ("train", "b"): "0 0.3 0.3 0.2 0.2\n",
        ("val", "c"): "25 0.5 0.5 0.4 0.4\n79 0.2 0.2 0.1 0.1\n",
    }
    for seed, ((split, name), content) in enumerate(labels.items()):
        image(root / "images" / split / f"{name}.jpg", seed)
        write(root / "labels" / split / f"{name}.txt", content)
    names = "".join(f"  {class_id}: {name}\n" for class_id, name in enumerate(COCO_NAMES))
    return write(
        root / "coco8.yaml", "path: .\ntrain: images/train\nval: images/val\nnames:\n" + names
    )


def test_a_yolo_yaml_s_names_are_the_ids_on_every_split(tmp_path, capsys):
    """The issue's case: coco8 failed with half its rows unseen_label, as ids were learnt
    from TRAIN. Now every object's class/label is its YOLO id + 1 and its text the name,
    on VAL too, and the label map holds the 80 declared classes."""
    yaml = coco8_like(tmp_path / "coco8")
    status, summary, examples, label_map, letters = convert(yaml, tmp_path / "out")
    assert (status, letters) == (0, [])
    assert (
        capsys.readouterr().out.count(f"label ids: the 80 classes declared by {yaml} (names)") == 1
    )
    assert objects(examples["a.jpg"]) == [(1, "person"), (46, "bowl")]
    assert objects(examples["c.jpg"]) == [(26, "umbrella"), (80, "toothbrush")]
    assert label_map == dict(enumerate(COCO_NAMES, start=1))
    assert summary["vocabulary"]["label"] == list(COCO_NAMES)
    assert (summary["vocabulary_declared_by"], summary["vocabulary_pinned_from"]) == (
        f"{yaml} (names)",
        None,
    )
    published = (tmp_path / "out" / "transform_fn" / "assets" / "label").read_text()
    assert published.splitlines() == list(COCO_NAMES)


def test_vocabulary_overrides_a_declaration_and_says_so(tmp_path, capsys):
    yaml = coco8_like(tmp_path / "coco8")
    vocabulary = write(tmp_path / "ids.txt", "bowl\nperson\numbrella\ntoothbrush\n")
    pinned, rows = decided("--manifest", yaml, "--vocabulary", vocabulary)
    assert (
        f"label ids: --vocabulary {vocabulary} overrides the classes declared by {yaml} (names)"
    ) in capsys.readouterr().out
    assert objects_decided(pinned, rows)["a.jpg"] == [(2, "person"), (1, "bowl")]
    assert label_map_of(pinned) == {1: "bowl", 2: "person", 3: "umbrella", 4: "toothbrush"}
    # Not declared: summary.json's vocabulary_pinned_from, not vocabulary_declared_by.
    assert (pinned.source, pinned.declared) == (str(vocabulary), False)


def test_a_yaml_with_nc_alone_declares_class_0_and_on(tmp_path):
    root = tmp_path / "ds"
    image(root / "images" / "val" / "a.jpg")
    write(root / "labels" / "val" / "a.txt", "2 0.5 0.5 0.2 0.2\n")
    yaml = write(root / "data.yaml", "path: .\nval: images/val\nnc: 3\n")
    # VAL alone: without the declaration it was refused, no TRAIN row to learn ids from
    # (run.py refuses where nothing is pinned).
    pinned, rows = decided("--manifest", yaml)
    assert objects_decided(pinned, rows)["a.jpg"] == [(3, "class_2")]
    assert (pinned.source, pinned.declared) == (f"{yaml} (nc)", True)


def coco_file(path, categories, annotations, images=(("a.jpg", 64, 48),)):
    """A COCO instances file over JPEGs made beside it; `annotations`: (image index,
    category_id) each, a box in the image's middle."""
    for seed, (name, width, height) in enumerate(images):
        image(path.parent / name, seed, (width, height))
    path.write_text(
        json.dumps(
            {
                "images": [
                    {"id": index + 10, "file_name": name, "width": width, "height": height}
                    for index, (name, width, height) in enumerate(images)
                ],
                "categories": [
                    {"id": category_id, "name": name} for category_id, name in categories
                ],
                "annotations": [
                    {
                        "id": number,
                        "image_id": index + 10,
                        "category_id": category_id,
                        "bbox": [8, 8, 16, 16],
                        "iscrowd": 0,
                    }
                    for number, (index, category_id) in enumerate(annotations, start=1)
                ],
            }
        )
    )
    return path


def test_coco_category_ids_with_gaps_are_the_class_labels(tmp_path):
    """create_coco_tf_record writes image/object/class/label = category_id: ids the file
    skips stay skipped, and the label map holds the categories' own ids."""
    manifest = coco_file(
        tmp_path / "instances.json", [(1, "person"), (3, "car"), (7, "dog")], [(0, 7), (0, 1)]
    )
    status, summary, examples, label_map, letters = convert(f"TRAIN={manifest}", tmp_path / "out")
    assert (status, letters) == (0, [])
    assert objects(examples["a.jpg"]) == [(7, "dog"), (1, "person")]
    assert label_map == {1: "person", 3: "car", 7: "dog"}
    assert summary["vocabulary_declared_by"] == f"{manifest} (categories)"


def test_datumaro_s_coco_file_keeps_its_category_ids(tmp_path):
    """datumaro's instances_val.json (categories 1, 2 and 4: id 3 is skipped)."""
    manifest = tmp_path / "instances_val.json"
    shutil.copy(PUBLIC / "coco" / "datumaro_instances_val.json", manifest)
    image(tmp_path / "b.jpg", size=(5, 10))
    pinned, rows = decided("--manifest", f"TRAIN={manifest}")
    assert objects_decided(pinned, rows)["b.jpg"] == [(1, "a"), (2, "b")]
    assert label_map_of(pinned) == {1: "a", 2: "b", 4: "c"}


def test_coco_categories_from_id_0_are_shifted_by_one_and_the_console_says_so(tmp_path, capsys):
    manifest = coco_file(tmp_path / "instances.json", [(0, "cat"), (1, "dog")], [(0, 0), (0, 1)])
    # VALIDATION alone: refused before the job without a declaration (no TRAIN ids).
    pinned, rows = decided("--manifest", f"VALIDATION={manifest}")
    assert objects_decided(pinned, rows)["a.jpg"] == [(1, "cat"), (2, "dog")]
    assert label_map_of(pinned) == {1: "cat", 2: "dog"}
    assert (
        f"label ids: the 2 classes declared by {manifest} (categories) (a category has "
        "id 0, so each class label is its category_id + 1"
    ) in capsys.readouterr().out


def test_coco_categories_that_share_a_name_or_an_id_are_refused(tmp_path):
    manifest = coco_file(tmp_path / "instances.json", [(1, "cat"), (2, "cat")], [])
    with pytest.raises(ManifestError, match="categories 1 and 2 are both named 'cat'"):
        declared_classes(str(manifest))
    coco_file(manifest, [(1, "cat"), (1, "dog")], [])
    with pytest.raises(ManifestError, match="two categories have id 1"):
        declared_classes(str(manifest))


def test_files_that_declare_different_classes_are_refused_naming_both(tmp_path):
    train = coco_file(tmp_path / "train.json", [(1, "cat"), (2, "dog")], [])
    val = coco_file(tmp_path / "val.json", [(1, "cat"), (2, "cow")], [])
    with pytest.raises(
        ManifestError,
        match=f"{train} \\(categories\\) and {val} "
        "\\(categories\\) declare different classes \\(class 2 of the one is "
        "'dog', of the other 'cow'\\)",
    ):
        declared_classes(f"TRAIN={train}", f"VALIDATION={val}")
    coco_file(val, [(1, "cat"), (2, "dog")], [])
    declared = declared_classes(f"TRAIN={train}", f"VALIDATION={val}")
    assert declared.labels == ("cat", "dog")
    assert declared.declared_by == f"{train} (categories) and 1 other file"


CVAT_TASK = """
    <annotations>
      <version>1.1</version>
      <meta><task><name>t</name><labels>
        <label><name>car</name><color>#fa3253</color><type>any</type><attributes/></label>
        <label><name>person</name><type>skeleton</type><attributes/></label>
        <label><name>nose</name><type>points</type><attributes/><parent>person</parent></label>
        <label><name>bicycle</name><type>any</type><attributes/></label>
      </labels></task></meta>
      <image id="0" name="a.jpg" width="64" height="48" subset="Train">
        <box label="bicycle" xtl="2" ytl="2" xbr="20" ybr="20" occluded="0"/>
      </image>
      <image id="1" name="b.jpg" width="64" height="48" subset="Validation">
        <box label="car" xtl="2" ytl="2" xbr="20" ybr="20" occluded="0"/>
      </image>
    </annotations>
"""


def test_cvat_labels_are_the_ids_in_their_order(tmp_path):
    """CVAT's <labels> in order (datumaro's TF export numbers them from 1); a skeleton's
    points (labels with a <parent>) are not classes."""
    image(tmp_path / "a.jpg")
    image(tmp_path / "b.jpg", 1)
    manifest = write(tmp_path / "annotations.xml", CVAT_TASK)
    pinned, rows = decided("--manifest", manifest)
    objects_of = objects_decided(pinned, rows)
    assert objects_of["a.jpg"] == [(3, "bicycle")]
    assert objects_of["b.jpg"] == [(1, "car")]  # no TRAIN car: the id is declared
    assert [row.split for row in rows] == ["train", "validation"]
    assert label_map_of(pinned) == {1: "car", 2: "person", 3: "bicycle"}
    assert (pinned.source, pinned.declared) == (f"{manifest} (<labels>)", True)


def test_datumaro_s_cvat_files_declare_their_labels(tmp_path):
    for name in ("datumaro_task_train.xml", "datumaro_project_annotations.xml"):
        declared = declared_classes(str(PUBLIC / "cvat" / name))
        assert declared.labels == ("label1", "label2")


def voc_dataset(root, class_list, objects_by_image):
    """A VOCdevkit year folder: Annotations/, JPEGImages/ and `class_list`'s files."""
    for seed, (name, objects_in) in enumerate(objects_by_image.items()):
        image(root / "JPEGImages" / name, seed)
        write(
            root / "Annotations" / f"{name[:-4]}.xml",
            voc_annotation(name, (64, 48), [(label, (2, 2, 30, 30), 0, 0) for label in objects_in]),
        )
    for name, content in class_list.items():
        write(root / name, content)
    return root


def test_a_voc_labelmap_txt_is_the_ids_and_a_label_outside_it_a_dead_letter(tmp_path):
    """datumaro's and CVAT's labelmap.txt: background is VOC's index 0, the API's
    background too, so aeroplane gets class label 1 (pascal_label_map.pbtxt's id)."""
    root = voc_dataset(
        tmp_path / "VOC2012",
        {
            "labelmap.txt": """
        # label:color_rgb:parts:actions
        background:0,0,0::
        aeroplane:128,0,0::
        bicycle:0,128,0::
        cat:64,0,0::
        """
        },
        {"a.jpg": ["cat", "aeroplane"], "b.jpg": ["zebra"]},
    )
    status, summary, examples, label_map, letters = convert(
        f"TRAIN={root}", tmp_path / "out", "--max_error_fraction", "0.5"
    )
    assert status == 0
    assert objects(examples["a.jpg"]) == [(3, "cat"), (1, "aeroplane")]
    assert label_map == {1: "aeroplane", 2: "bicycle", 3: "cat"}
    (letter,) = letters
    assert letter["reason"] == "unseen_label"
    assert (
        f"'zebra' is not among the 3 classes declared by {root}/labelmap.txt" in letter["message"]
    )


def test_voc_class_lists_that_differ_are_refused(tmp_path):
    root = voc_dataset(
        tmp_path / "VOC",
        {"labelmap.txt": "background:0,0,0::\ncat:1,1,1::\n", "labels.txt": "dog\n"},
        {"a.jpg": ["cat"]},
    )
    with pytest.raises(ManifestError, match="labelmap.txt and .*labels.txt list different"):
        declared_classes(str(root))


CARD = """
    ---
    dataset_info:
      features:
      - name: image
        dtype: image
      - name: label
        dtype:
          class_label:
            names:
              '0': cat
              '1': dog
              '2': bird
      splits:
      - name: train
        num_examples: 2
    ---
    # A dataset card
"""


def test_a_hugging_face_class_label_is_the_ids_and_names_its_numbers(tmp_path):
    """The dataset card's ClassLabel: a value that is a whole number is the class of that
    id (datasets' str2int), a name is itself; the ids are the card's, on every split."""
    write(tmp_path / "README.md", CARD)
    for seed, (split, items) in enumerate(
        {"train": [("a.jpg", 2), ("b.jpg", "cat")], "test": [("c.jpg", "1")]}.items()
    ):
        for place, (name, _) in enumerate(items):
            image(tmp_path / split / name, 2 * seed + place)
        write(
            tmp_path / split / "metadata.jsonl",
            "".join(
                json.dumps({"file_name": name, "label": label}) + "\n" for name, label in items
            ),
        )
    output = tmp_path / "out"
    assert (
        run.main(
            ["--manifest", str(tmp_path / "*" / "metadata.jsonl"), "--output_dir", str(output)]
        )
        == 0
    )
    summary = json.loads((output / "summary.json").read_text())
    assert summary["vocabulary"]["label"] == ["cat", "dog", "bird"]
    assert summary["vocabulary_declared_by"] == f"{tmp_path}/README.md (dataset_info class_label)"
    labels = {
        example.features.feature["image/filename"]
        .bytes_list.value[0]
        .decode(): example.features.feature["image/class/label"].int64_list.value[0]
        for example in read_examples(f"{output}/*.tfrecord")
    }
    assert labels == {"a.jpg": 2, "b.jpg": 0, "c.jpg": 1}


def test_a_hugging_face_object_detection_card_declares_the_categories(tmp_path):
    write(
        tmp_path / "README.md",
        """
        ---
        dataset_info:
          features:
          - name: objects
            sequence:
            - name: bbox
              sequence: float32
              length: 4
            - name: category
              dtype:
                class_label:
                  names: [coverall, face_shield, gloves]
        ---
        """,
    )
    image(tmp_path / "train" / "a.jpg")
    write(
        tmp_path / "train" / "metadata.jsonl",
        json.dumps(
            {
                "file_name": "a.jpg",
                "objects": {"bbox": [[2, 2, 10, 10], [4, 4, 8, 8]], "category": [2, 0]},
            }
        )
        + "\n",
    )
    pinned, rows = decided("--manifest", tmp_path / "train" / "metadata.jsonl")
    assert objects_decided(pinned, rows)["a.jpg"] == [(3, "gloves"), (1, "coverall")]
    assert label_map_of(pinned) == {1: "coverall", 2: "face_shield", 3: "gloves"}


def test_numbers_declared_as_class_names_raise_no_numeric_warning(tmp_path):
    """The numeric warning says learnt ids are not the labels' numbers; declared ids are
    the dataset's own, so it stays silent (it fired on COCO categories named by numbers)."""
    manifest = coco_file(tmp_path / "instances.json", [(1, "10"), (2, "20")], [(0, 2), (0, 1)])
    status, summary, examples, _, _ = convert(f"TRAIN={manifest}", tmp_path / "out")
    assert status == 0
    assert objects(examples["a.jpg"]) == [(2, "20"), (1, "10")]
    assert summary["label_warnings"] == []


def test_the_resume_fingerprint_covers_a_declaration_beside_the_manifests(tmp_path):
    """A VOC labelmap.txt is no manifest: the fingerprint holds the declared classes, so
    a stopped run made with other ones is not resumed."""
    root = voc_dataset(
        tmp_path / "VOC", {"labelmap.txt": "cat:1,1,1::\ndog:2,2,2::\n"}, {"a.jpg": ["cat"]}
    )
    convert_options = PipelineOptions(
        [
            "--manifest",
            str(root),
            "--label_mode",
            "detection",
            "--output_dir",
            str(tmp_path / "out"),
        ]
    ).view_as(ConvertOptions)

    def fingerprint():
        manifests = find_manifests([str(root)])
        pinned = run._pinned_vocabulary(convert_options, manifests)
        return scan_sources(convert_options, manifests, pinned, {}, 1).fingerprint.sources

    before = fingerprint()
    assert f"declared classes {root}/labelmap.txt" in before
    write(root / "labelmap.txt", "dog:2,2,2::\ncat:1,1,1::\n")
    assert fingerprint() != before


def test_inputs_of_which_only_some_declare_classes_learn_the_ids_and_say_so(tmp_path, capsys):
    """A declaration speaks for its own files: a VOC folder without a class list beside a
    COCO file would have its labels outside the COCO categories."""
    coco = coco_file(tmp_path / "coco" / "instances.json", [(1, "dog"), (5, "cat")], [(0, 1)])
    voc = voc_dataset(tmp_path / "VOC", {}, {"v.jpg": ["dog", "bird"]})
    pinned, rows = decided("--manifest", f"VALIDATION={coco}", "--manifest", f"TRAIN={voc}")
    assert (
        f"label ids: learnt from TRAIN, as 1 of the 2 inputs declares no classes "
        f"(declared by {coco} (categories)); pin them with --vocabulary"
    ) in capsys.readouterr().out
    assert pinned is None  # learnt: summary.json's vocabulary_declared_by is None
    # What the ids are learnt from: TRAIN's labels, bird among them, outside COCO's.
    assert sorted({label for row in rows if row.split == "train" for label in row.labels}) == [
        "bird",
        "dog",
    ]
    assert {label for row in rows for label in row.labels} == {"bird", "dog"}
