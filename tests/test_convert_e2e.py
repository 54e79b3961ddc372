"""End to end on the DirectRunner: real images in, shards + transform_fn + summary out,
in each file format (`converted` is parametrised by --file_format)."""

import glob
import hashlib
import io
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft
from conftest import (
    FILE_FORMATS,
    SAMPLE_DATA,
    encode,
    feature,
    photo_like,
    png_declaring,
    read_examples,
    shard_pattern,
    shard_records,
)
from PIL import Image
from test_report_page import Page, chromium

from image_tfrecords.core.inputs.rows import assign_split
from image_tfrecords.core.records.naming import REPORT_FILE
from image_tfrecords.pipeline import run
from image_tfrecords.transforms.shards import shard_of
from image_tfrecords.verify import verify

LABELS = ("cat", "dog", "fish")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Images of every kind the issue names, and one row per kind of failure."""
    root = tmp_path_factory.mktemp("data")
    (root / "img").mkdir()
    rows, expected = [], {}

    def add(name, data, split, label, source=None):
        (root / "img" / name).write_bytes(data)
        rows.append(f"{split},img/{name},{label}")
        expected[str(root / "img" / name)] = (split, label, source)

    for i in range(18):
        split = ("TRAIN", "train", "Validation", "test")[i % 4] if i >= 6 else "train"
        label = LABELS[i % 3]
        image = photo_like(40 + i, 30 + 2 * i, seed=i)
        add(f"photo{i:02d}.jpg", encode(image, "JPEG", quality=90), split, label)
    add("rgba.png", encode(photo_like(33, 21, 1, "RGBA"), "PNG"), "train", "cat")
    add("gray.png", encode(photo_like(25, 17, 2, "L"), "PNG"), "validation", "dog")
    gif = photo_like(24, 24, 3).quantize(64)
    add("palette.gif", encode(gif, "GIF"), "train", "fish", source=gif.convert("RGB"))
    tiff = photo_like(20, 28, 4)
    add("photo.tiff", encode(tiff, "TIFF"), "test", "cat", source=tiff)

    (root / "img" / "empty.jpg").write_bytes(b"")
    (root / "img" / "text.jpg").write_text("not an image\n")
    whole = encode(photo_like(64, 64, 5), "JPEG")
    (root / "img" / "truncated.jpg").write_bytes(whole[: len(whole) // 2])
    (root / "img" / "bomb.png").write_bytes(png_declaring(100_000, 100_000))
    add("unseen.jpg", encode(photo_like(16, 16, 6), "JPEG"), "test", "bird")
    broken = {
        "missing.jpg": ("train", "file_not_found"),
        "empty.jpg": ("train", "empty_file"),
        "text.jpg": ("validation", "not_an_image"),
        "truncated.jpg": ("test", "truncated_image"),
        "bomb.png": ("train", "decompression_bomb"),
    }
    rows += [f"{split},img/{name},cat" for name, (split, _) in broken.items()]
    rows.append("TRIAN,img/photo00.jpg,cat")
    (root / "manifest.csv").write_text(
        "image_uri,split,label\n"
        + "\n".join(f"{r.split(',')[1]},{r.split(',')[0]},{r.split(',')[2]}" for r in rows)
        + "\n"
    )
    reasons = {f"img/{n}": reason for n, (_, reason) in broken.items()}
    return root, expected, reasons


def convert(manifest, output, *flags):
    return run.main(["--manifest", str(manifest), "--output_dir", str(output), *flags])


@pytest.fixture(scope="module", params=FILE_FORMATS)
def converted(request, dataset, tmp_path_factory):
    root, _, _ = dataset
    output = tmp_path_factory.mktemp("out") / request.param
    code = convert(
        root / "manifest.csv", output, "--max_error_fraction", "0.5", "--file_format", request.param
    )
    return output, code


def test_run_succeeds_and_writes_each_split(converted):
    output, code = converted
    assert code == 0
    names = sorted(os.listdir(output))
    suffix = {"tfrecord": ".tfrecord", "array_record": ".array_record"}[output.name]
    for split in ("train", "validation", "test"):
        assert f"{split}-00000-of-00001{suffix}" in names
    assert {
        "transform_fn",
        "transformed_metadata",
        "summary.json",
        "errors-00000-of-00001.jsonl",
    } <= set(names)
    assert not [n for n in names if n.startswith(".tmp")], "temp dir left behind"


def test_every_example_decodes_to_its_source_pixels(converted, dataset):
    output, _ = converted
    root, expected, _ = dataset
    seen = set()
    for split in ("train", "validation", "test"):
        for example in read_examples(shard_pattern(output, split)):
            uri = feature(example, "image/source_id").decode()
            want_split, label, source = expected[uri]
            assert want_split.lower() == split
            assert feature(example, "image/class/text").decode() == label
            encoded = feature(example, "image/encoded")
            decoded = tf.io.decode_image(encoded).numpy()
            source_bytes = open(uri, "rb").read()
            if source is None:  # JPEG and PNG are stored byte for byte
                assert encoded == source_bytes
                assert feature(example, "image/format").decode() == Image.open(uri).format.lower()
            else:
                assert feature(example, "image/format") == b"png"
                assert np.array_equal(decoded, np.asarray(source))
            assert decoded.shape == (
                feature(example, "image/height"),
                feature(example, "image/width"),
                feature(example, "image/channels"),
            )
            assert feature(example, "image/filename").decode() == os.path.basename(uri)
            seen.add(uri)
    assert seen == {uri for uri, (_, label, _) in expected.items() if label != "bird"}


def test_label_ids_map_through_the_written_vocabulary(converted):
    output, _ = converted
    transform_output = tft.TFTransformOutput(str(output))
    vocabulary = [w.decode() for w in transform_output.vocabulary_by_name("label")]
    assert sorted(vocabulary) == sorted(LABELS)  # TRAIN's labels, not the unseen "bird"
    for split in ("train", "validation", "test"):
        for example in read_examples(shard_pattern(output, split)):
            label_id = feature(example, "image/class/label")
            assert vocabulary[label_id] == feature(example, "image/class/text").decode()
    served = transform_output.transform_features_layer()({"label": tf.constant(["dog", "bird"])})
    assert served["label_id"].numpy().tolist() == [vocabulary.index("dog"), -1]


def test_summary_matches_the_files(converted, dataset):
    output, _ = converted
    _, expected, reasons = dataset
    summary = json.loads((output / "summary.json").read_text())
    good = [uri for uri, (_, label, _) in expected.items() if label != "bird"]
    assert summary["rows_read"] == len(expected) + len(reasons) + 1
    assert summary["examples_written"] == len(good)
    assert summary["rows_dead_lettered"] == len(reasons) + 2
    assert summary["accounted"] is True
    for split, stats in summary["splits"].items():
        files = stats["shards"]
        counted = sum(len(shard_records(output / f["file"])) for f in files)
        assert counted == stats["examples"] == sum(f["records"] for f in files)
        assert all(f["bytes"] == os.path.getsize(output / f["file"]) for f in files)
        assert sum(stats["labels"].values()) == stats["examples"]
        want = sum(1 for uri in good if expected[uri][0].lower() == split)
        assert stats["examples"] == want
    assert summary["splits"]["train"]["reencoded"] == {"format": 1}
    assert summary["versions"]["apache-beam"].startswith("2.")
    assert summary["options"]["max_error_fraction"] == 0.5


def test_dead_letters_name_row_and_reason(converted, dataset):
    output, _ = converted
    _, _, reasons = dataset
    letters = [
        json.loads(line)
        for line in (output / "errors-00000-of-00001.jsonl").read_text().splitlines()
    ]
    by_uri = {letter["raw"].split(",")[0]: letter for letter in letters}
    for uri, reason in reasons.items():
        assert by_uri[uri]["reason"] == reason, by_uri[uri]
        assert by_uri[uri]["line"] > 1 and by_uri[uri]["message"]
    assert by_uri["img/unseen.jpg"]["reason"] == "unseen_label"
    assert by_uri["img/photo00.jpg"]["reason"] == "invalid_split"
    assert len(letters) == len(reasons) + 2


def hashes(output):
    """Every file of an output but the runs' temp dirs, with its SHA-256."""
    return {
        os.path.relpath(os.path.join(folder, name), output): hashlib.sha256(
            open(os.path.join(folder, name), "rb").read()
        ).hexdigest()
        for folder, _, names in os.walk(output)
        if "/.tmp-" not in folder + "/"
        for name in names
    }


def failure_paths(err):
    """The dead letters and FAILED.json that the console's `error:` line names."""
    (line,) = [line for line in err.splitlines() if line.startswith("error: ")]
    letters = re.search(r"dead letters: (\S+);", line).group(1)
    return line, letters, re.search(r"the run's summary: (\S+)$", line).group(1)


def test_error_fraction_over_the_limit_publishes_nothing_and_says_where_the_dead_letters_are(
    converted, dataset, tmp_path, capsys
):
    root, _, reasons = dataset
    output = shutil.copytree(converted[0], tmp_path / "out")  # a good earlier output
    before = hashes(output)
    capsys.readouterr()
    assert convert(root / "manifest.csv", output, "--overwrite") == run.EXIT_FAILED
    line, letters, record = failure_paths(capsys.readouterr().err)
    assert "more than --max_error_fraction 1.0%" in line and "Nothing was published" in line
    assert hashes(output) == before  # byte for byte, summary.json included
    assert verify(str(output)).examples == {
        split: stats["examples"]
        for split, stats in json.loads((output / "summary.json").read_text())["splits"].items()
    }
    # The evidence, where the console says: the run's dead letters and why it failed.
    staged = os.path.dirname(letters)
    assert re.fullmatch(rf"{re.escape(str(output))}/\.tmp-\w+/staged", staged)
    assert (letters, record) == (f"{staged}/errors-00000-of-00001.jsonl", f"{staged}/FAILED.json")
    dead = {
        json.loads(line)["raw"].split(",")[0]: json.loads(line)["reason"] for line in open(letters)
    }
    assert reasons.items() <= dead.items()
    failed = json.loads(open(record).read())
    assert failed["problems"] == [line[len("error: ") : line.index(". Nothing")]]
    assert failed["summary"]["rows_dead_lettered"] == len(dead)
    # The staged report, where the docs send the user, opens on the failure, in Chromium.
    page = Page(chromium(tmp_path, "--dump-dom", Path(staged, REPORT_FILE).as_uri()))
    assert page.text[0].startswith("This run FAILED") and "good" not in page.classes
    assert " ".join(page.text).index(failed["problems"][0]) < " ".join(page.text).index("Rows read")


@pytest.fixture(scope="module")
def relabelled(tmp_path_factory):
    """A first manifest, and a second where dog outnumbers cat in TRAIN and fish's only
    TRAIN image is missing."""
    root = tmp_path_factory.mktemp("relabelled")
    (root / "img").mkdir()
    for i in range(10):
        (root / "img" / f"{i}.jpg").write_bytes(encode(photo_like(20, 16, i), "JPEG"))
    first = [
        "train,img/0.jpg,cat",
        "train,img/1.jpg,cat",
        "train,img/2.jpg,cat",
        "train,img/3.jpg,dog",
        "train,img/8.jpg,dog",
        "train,img/4.jpg,fish",
        "test,img/5.jpg,dog",
    ]
    second = [
        "train,img/0.jpg,cat",
        "train,img/1.jpg,dog",
        "train,img/2.jpg,dog",
        "train,img/3.jpg,dog",
        "train,img/missing.jpg,fish",
        "test,img/5.jpg,fish",
        "test,img/6.jpg,cat",
        "test,img/7.jpg,bird",
    ]
    (root / "first.csv").write_text("\n".join(first) + "\n")
    (root / "second.csv").write_text("\n".join(second) + "\n")
    output = root / "first-out"
    assert convert(root / "first.csv", output) == 0
    return root, output


def label_ids(output):
    """(source file name, label text, label id) of every example."""
    return sorted(
        (
            os.path.basename(feature(e, "image/source_id").decode()),
            feature(e, "image/class/text").decode(),
            feature(e, "image/class/label"),
        )
        for e in read_examples(f"{output}/*.tfrecord")
    )


def test_a_label_whose_train_rows_all_failed_keeps_its_sorted_id_or_fails_frequency_order(
    relabelled, tmp_path, capsys
):
    root, first = relabelled
    assert vocabulary_of(first) == ["cat", "dog", "fish"]
    before = hashes(first)
    capsys.readouterr()
    # By frequency, fish would keep an id that no TRAIN example has, its place taken
    # from rows that are dead letters: refused, the earlier output intact.
    assert (
        convert(
            root / "second.csv",
            first,
            "--overwrite",
            "--max_error_fraction",
            "0.5",
            "--label_order",
            "frequency",
        )
        == run.EXIT_FAILED
    )
    line, _, _ = failure_paths(capsys.readouterr().err)
    assert (
        "labels without a written TRAIN example would get ids: 'fish' (1 TRAIN row, all "
        "dead-lettered); fix those rows, pin the ids with --vocabulary" in line
    )
    assert hashes(first) == before

    # Sorted, its id depends only on the set of labels: fish keeps it, and the console
    # names it; no id changed from the output replaced.
    replaced = shutil.copytree(first, tmp_path / "replaced")
    assert convert(root / "second.csv", replaced, "--overwrite", "--max_error_fraction", "0.5") == 0
    out = capsys.readouterr().out
    assert (
        "warning: labels without a written TRAIN example (their TRAIN rows are dead "
        "letters) keep their sorted ids: fish"
    ) in out
    assert "label ids differ" not in out
    assert vocabulary_of(replaced) == ["cat", "dog", "fish"]
    assert json.loads((replaced / "summary.json").read_text())["unwritten_labels"] == ["fish"]

    # Pinned to the first output's ids: the same ids though dog is now the most frequent;
    # fish keeps its id without a TRAIN example, bird is unseen.
    second = tmp_path / "second"
    assert (
        convert(
            root / "second.csv", second, "--vocabulary", str(first), "--max_error_fraction", "0.5"
        )
        == 0
    )
    assert vocabulary_of(second) == ["cat", "dog", "fish"]
    assert label_ids(second) == [
        ("0.jpg", "cat", 0),
        ("1.jpg", "dog", 1),
        ("2.jpg", "dog", 1),
        ("3.jpg", "dog", 1),
        ("5.jpg", "fish", 2),
        ("6.jpg", "cat", 0),
    ]
    summary = json.loads((second / "summary.json").read_text())
    assert summary["vocabulary_pinned_from"] == f"{first}/transform_fn/assets/label"
    assert summary["errors"]["by_reason"] == {"file_not_found": 1, "unseen_label": 1}
    letters = (second / "errors-00000-of-00001.jsonl").read_text()
    assert f"label 'bird' is not in the pinned vocabulary {first}/transform_fn" in letters


def test_a_vocabulary_file_fixes_the_ids_the_examples_and_the_transform_fn_use(
    relabelled, tmp_path, capsys
):
    root, _ = relabelled
    (tmp_path / "labels.txt").write_text("fish\nbird\ndog\ncat\nzebra\n")
    output = tmp_path / "out"
    assert (
        convert(
            root / "second.csv",
            output,
            "--vocabulary",
            str(tmp_path / "labels.txt"),
            "--max_error_fraction",
            "0.2",
        )
        == 0
    )
    assert vocabulary_of(output) == ["fish", "bird", "dog", "cat", "zebra"]
    assert label_ids(output) == [
        ("0.jpg", "cat", 3),
        ("1.jpg", "dog", 2),
        ("2.jpg", "dog", 2),
        ("3.jpg", "dog", 2),
        ("5.jpg", "fish", 0),
        ("6.jpg", "cat", 3),
        ("7.jpg", "bird", 1),
    ]
    served = tft.TFTransformOutput(str(output)).transform_features_layer()(
        {"label": tf.constant(["cat", "zebra", "fish", "lion"])}
    )
    assert served["label_id"].numpy().tolist() == [3, 4, 0, -1]
    assert verify(str(output)).examples == {"train": 4, "validation": 0, "test": 3}

    (tmp_path / "twice.txt").write_text("cat\ndog\ncat\n")
    capsys.readouterr()
    assert (
        convert(
            root / "second.csv", tmp_path / "other", "--vocabulary", str(tmp_path / "twice.txt")
        )
        == run.EXIT_USAGE
    )
    assert capsys.readouterr().err == (
        f"error: --vocabulary {tmp_path}/twice.txt: line 3: 'cat' repeats line 1\n"
    )


def vocabulary_of(output):
    return [w.decode() for w in tft.TFTransformOutput(str(output)).vocabulary_by_name("label")]


def test_gzip_fixed_shards_oov_and_overwrite_replaces_stale_shards(dataset, tmp_path):
    root, expected, _ = dataset
    output = tmp_path / "out"
    flags = [
        "--max_error_fraction",
        "0.5",
        "--compression",
        "gzip",
        "--num_shards",
        "3",
        "--unseen_label",
        "oov",
    ]
    assert convert(root / "manifest.csv", output, *flags) == 0
    train = sorted(glob.glob(f"{output}/train-*.tfrecord.gz"))
    # A shard that got no image is not written; which do depends on the URIs' hashes.
    used = len(
        {shard_of(uri, 3) for uri, (split, _, _) in expected.items() if split.lower() == "train"}
    )
    assert train == [f"{output}/train-{i:05d}-of-{used:05d}.tfrecord.gz" for i in range(used)]
    test_examples = read_examples(f"{output}/test-*.tfrecord.gz")
    vocabulary = tft.TFTransformOutput(str(output)).vocabulary_by_name("label")
    bird = [e for e in test_examples if feature(e, "image/class/text") == b"bird"]
    assert len(bird) == 1 and feature(bird[0], "image/class/label") == len(vocabulary)
    summary = json.loads((output / "summary.json").read_text())
    assert summary["splits"]["test"]["unseen_label_examples"] == 1
    first_run = {name: open(name, "rb").read() for name in train}

    assert convert(root / "manifest.csv", output, *flags) == run.EXIT_USAGE  # not empty
    assert convert(root / "manifest.csv", output, *flags, "--overwrite") == 0
    assert {name: open(name, "rb").read() for name in train} == first_run  # deterministic

    flags[flags.index("--num_shards") + 1] = "1"
    assert convert(root / "manifest.csv", output, *flags, "--overwrite") == 0
    # The stale shards and their indexes are gone.
    assert sorted(glob.glob(f"{output}/train-*")) == [
        f"{output}/train-00000-of-00001.tfrecord.gz",
        f"{output}/train-00000-of-00001.tfrecord.gz.idx",
    ]


def test_usage_errors_are_one_clear_line(tmp_path, capsys):
    assert convert(tmp_path / "nope.csv", tmp_path / "out") == run.EXIT_USAGE
    assert capsys.readouterr().err.strip() == f"error: manifest not found: {tmp_path}/nope.csv"
    (tmp_path / "m.csv").write_text("train,a.jpg,cat\n")
    assert convert(tmp_path / "m.csv", tmp_path / "out", "--jpeg_quality", "0") == 2
    assert "--jpeg_quality must be between 1 and 100" in capsys.readouterr().err


def test_a_split_with_no_rows_writes_no_shards(tmp_path):
    (tmp_path / "a.jpg").write_bytes(encode(photo_like(20, 20, 1), "JPEG"))
    shutil.copy(tmp_path / "a.jpg", tmp_path / "b.jpg")
    (tmp_path / "m.csv").write_text("train,a.jpg,cat\nvalidation,b.jpg,cat\n")
    assert convert(tmp_path / "m.csv", tmp_path / "out") == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["empty_splits"] == ["test"]
    assert not glob.glob(f"{tmp_path}/out/test-*")


def test_image_options_reach_the_writer(dataset, tmp_path):
    root, _, _ = dataset
    output = tmp_path / "out"
    assert (
        convert(
            root / "manifest.csv",
            output,
            "--max_error_fraction",
            "0.5",
            "--image_format",
            "png",
            "--max_side",
            "24",
        )
        == 0
    )
    examples = read_examples(f"{output}/*.tfrecord")
    assert examples and all(feature(e, "image/format") == b"png" for e in examples)
    for example in examples:
        decoded = tf.io.decode_image(feature(example, "image/encoded")).numpy()
        assert max(decoded.shape[:2]) <= 24
        assert decoded.shape[:2] == (
            feature(example, "image/height"),
            feature(example, "image/width"),
        )
    summary = json.loads((output / "summary.json").read_text())
    assert summary["splits"]["train"]["reencoded"]["resized"] > 0


def test_several_manifests_without_splits_make_one_output(tmp_path):
    (tmp_path / "img").mkdir()
    labels = {f"{i:02d}.jpg": ("cat", "dog", "fish")[i % 3] for i in range(18)}
    for i, name in enumerate(labels):
        (tmp_path / "img" / name).write_bytes(encode(photo_like(20, 16, i), "JPEG"))
    names = list(labels)
    (tmp_path / "no-split-column.csv").write_text(
        "image_uri,label\n" + "".join(f"img/{n},{labels[n]}\n" for n in names[:9])
    )
    (tmp_path / "unassigned-1.csv").write_text(
        "".join(f"UNASSIGNED,img/{n},{labels[n]}\n" for n in names[9:])
    )
    fractions = (0.5, 0.25, 0.25)
    assert (
        run.main(
            [
                "--manifest",
                str(tmp_path / "no-split-column.csv"),
                "--manifest",
                str(tmp_path / "unassigned-*.csv"),
                "--output_dir",
                str(tmp_path / "out"),
                "--split_fractions",
                "0.5,0.25,0.25",
                "--unseen_label",
                "oov",
            ]
        )
        == 0
    )
    seen = {}
    for split in ("train", "validation", "test"):
        for example in read_examples(f"{tmp_path}/out/{split}-*.tfrecord"):
            name = os.path.basename(feature(example, "image/source_id").decode())
            assert name not in seen
            seen[name] = split
            assert feature(example, "image/class/text").decode() == labels[name]
    assert seen == {name: assign_split(f"img/{name}", fractions) for name in names}
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["rows_read"] == 18 and summary["accounted"]
    assert len(summary["manifests"]) == 2


def test_give_either_a_manifest_or_a_folder(tmp_path, capsys):
    assert run.main(["--output_dir", str(tmp_path / "out")]) == run.EXIT_USAGE
    assert "give either --manifest or --image_folder" in capsys.readouterr().err
    assert (
        run.main(["--image_folder", str(tmp_path / "none"), "--output_dir", str(tmp_path / "out")])
        == run.EXIT_USAGE
    )
    assert "image folder not found or empty" in capsys.readouterr().err


def test_multi_label_examples_hold_every_label(tmp_path):
    (tmp_path / "img").mkdir()
    rows = {
        "0.jpg": ("train", "cat|dog"),
        "1.jpg": ("train", "cat"),
        "2.jpg": ("train", "fish"),
        "3.jpg": ("test", "dog|fish"),
        "4.jpg": ("test", "cat|bird"),
    }
    for i, name in enumerate(rows):
        (tmp_path / "img" / name).write_bytes(encode(photo_like(16, 12, i), "JPEG"))
    (tmp_path / "m.csv").write_text(
        "".join(
            f"{split},img/{name},{labels.replace('|', ',')}\n"
            for name, (split, labels) in rows.items()
        )
    )
    assert (
        run.main(
            [
                "--manifest",
                str(tmp_path / "m.csv"),
                "--output_dir",
                str(tmp_path / "out"),
                "--label_mode",
                "multi",
                "--max_error_fraction",
                "0.5",
            ]
        )
        == 0
    )
    output = tft.TFTransformOutput(str(tmp_path / "out"))
    vocabulary = [w.decode() for w in output.vocabulary_by_name("label")]
    spec = {
        "image/source_id": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.VarLenFeature(tf.int64),
        "image/class/text": tf.io.VarLenFeature(tf.string),
    }
    found = {}
    for split in ("train", "test"):
        for record in tf.data.TFRecordDataset(glob.glob(f"{tmp_path}/out/{split}-*.tfrecord")):
            parsed = tf.io.parse_single_example(record, spec)
            ids = tf.sparse.to_dense(parsed["image/class/label"]).numpy().tolist()
            texts = [t.decode() for t in tf.sparse.to_dense(parsed["image/class/text"]).numpy()]
            assert [vocabulary[i] for i in ids] == texts
            found[os.path.basename(parsed["image/source_id"].numpy().decode())] = (split, texts)
    assert found == {
        name: (split, labels.split("|"))
        for name, (split, labels) in rows.items()
        if "bird" not in labels
    }
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["splits"]["train"]["labels"] == {"cat": 2, "dog": 1, "fish": 1}
    assert summary["errors"]["by_reason"] == {"unseen_label": 1}
    served = output.transform_features_layer()(
        {"label": tf.sparse.from_dense(tf.constant([["dog", "fish"]]))}
    )
    assert tf.sparse.to_dense(served["label_id"]).numpy().tolist() == [
        [vocabulary.index("dog"), vocabulary.index("fish")]
    ]


def test_a_vertex_ai_jsonl_import_file_converts(tmp_path):
    (tmp_path / "img").mkdir()
    lines = []
    for i, (label, ml_use) in enumerate(
        [("cat", "training"), ("dog", "training"), ("cat", "validation"), ("dog", "test")]
    ):
        (tmp_path / "img" / f"{i}.jpg").write_bytes(encode(photo_like(16, 12, i), "JPEG"))
        lines.append(
            json.dumps(
                {
                    "imageGcsUri": f"img/{i}.jpg",
                    "classificationAnnotation": {"displayName": label},
                    "dataItemResourceLabels": {"aiplatform.googleapis.com/ml_use": ml_use},
                }
            )
        )
    (tmp_path / "import.jsonl").write_text("\n".join(lines) + "\n")
    assert (
        run.main(
            ["--manifest", str(tmp_path / "import.jsonl"), "--output_dir", str(tmp_path / "out")]
        )
        == 0
    )
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert {split: stats["labels"] for split, stats in summary["splits"].items()} == {
        "train": {"cat": 1, "dog": 1},
        "validation": {"cat": 1},
        "test": {"dog": 1},
    }


def test_the_readme_example_pins_the_sample_labels(tmp_path):
    """README's --vocabulary example on the bundled sample: bird, unseen in TRAIN, gets
    its pinned id instead of a dead letter."""
    output = tmp_path / "out-pinned"
    assert (
        convert(
            SAMPLE_DATA / "manifest.csv",
            output,
            "--vocabulary",
            str(SAMPLE_DATA / "labels.txt"),
            "--max_error_fraction",
            "0.25",
        )
        == 0
    )
    assert vocabulary_of(output) == ["bird", "cat", "coffee", "flower"]
    summary = json.loads((output / "summary.json").read_text())
    assert (summary["rows_read"], summary["examples_written"], summary["rows_dead_lettered"]) == (
        50,
        44,
        6,
    )
    assert ("bird_01.jpg", "bird", 0) in label_ids(output)


def test_every_image_written_reads_alike_in_pillow_and_tensorflow(tmp_path):
    """The docs' PyTorch and Grain readers (Pillow's open and convert("RGB")) and tf.data's
    decode_image give the same pixels for every image the converter writes, the modes
    such readers mishandle included: 16-bit grey (clipped to white by Pillow when kept),
    its TIFF, float TIFF, grey and palette with alpha, 1-bit, CMYK JPEG."""
    grey = np.asarray(photo_like(24, 16, seed=3, mode="L"))
    deep = (grey.astype(np.uint16) * 257 + np.arange(24, dtype=np.uint16)).astype(np.uint16)
    palette = photo_like(24, 16, seed=4).quantize(16)
    palette.info["transparency"] = 0
    images = {
        "deep.png": encode(Image.fromarray(deep), "PNG"),
        "deep.tif": encode(Image.fromarray(deep), "TIFF"),
        "float.tif": encode(Image.fromarray(grey.astype(np.float32)), "TIFF"),
        "grey_alpha.png": encode(photo_like(24, 16, seed=5, mode="LA"), "PNG"),
        "palette_alpha.png": encode(palette, "PNG"),
        "bilevel.png": encode(photo_like(24, 16, seed=6, mode="1"), "PNG"),
        "cmyk.jpg": encode(photo_like(24, 16, seed=7, mode="CMYK"), "JPEG"),
        "rgba.png": encode(photo_like(24, 16, seed=8, mode="RGBA"), "PNG"),
    }
    for name, data in images.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "m.csv").write_text("".join(f"TRAIN,{name},cat\n" for name in images))
    assert (
        run.main(["--manifest", str(tmp_path / "m.csv"), "--output_dir", str(tmp_path / "out")])
        == 0
    )
    written = {
        feature(example, "image/filename").decode(): feature(example, "image/encoded")
        for example in read_examples(shard_pattern(tmp_path / "out", "train"))
    }
    assert written.keys() == images.keys()
    for name, encoded in written.items():
        pillow = np.asarray(Image.open(io.BytesIO(encoded)).convert("RGB")).astype(int)
        tensorflow = tf.io.decode_image(encoded, channels=3).numpy().astype(int)
        difference = np.abs(pillow - tensorflow)
        if encoded[:2] == b"\xff\xd8":  # two JPEG decoders differ a little: the modes not
            assert Image.open(io.BytesIO(encoded)).mode in ("L", "RGB"), name
            assert difference.mean() <= 3, name
        else:
            assert difference.max() == 0, name
    deep_stored = np.asarray(Image.open(io.BytesIO(written["deep.png"])))
    np.testing.assert_array_equal(deep_stored, (deep >> 8).astype(np.uint8))
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["splits"]["train"]["reencoded"]["bit_depth"] == 1  # the PNG; TIFFs: format
