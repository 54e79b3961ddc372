"""--split_by groups (issue 57): copies, near-copies and declared groups kept in one split,
labels balanced, the same split every run. The plan on its own (core/launcher/
grouped_split.py), then whole conversions of real photos with planted copies, read back."""

import collections
import csv
import io
import itertools
import json
import os
import random
import re

import pytest
from conftest import SAMPLE_DATA, convert, feature, read_examples, row_accounting, shard_pattern
from PIL import Image
from test_reliability import published

from image_tfrecords.core.imaging.images import perceptual_hash
from image_tfrecords.core.launcher.grouped_split import PlannedImage, _near_pairs, plan_splits
from image_tfrecords.core.records.feature_keys import (
    CLASS_TEXT,
    IMAGE,
    IMAGE_SHA256,
    OBJECT_TEXT,
    SOURCE_ID,
)

FRACTIONS = (0.8, 0.1, 0.1)
DISTANCE = 10


def distance(a: int, b: int) -> int:
    return bin(a ^ b).count("1")


def image(uri, label="cat", sha=None, phash=None, group=None):
    """A planned image; its pHash, unless given, one far from any other's (random)."""
    if phash is None:
        phash = random.Random(uri).getrandbits(64)
    return PlannedImage(uri, (label,), sha or f"sha-{uri}", phash, group)


def test_the_bands_find_every_pair_within_the_distance_and_no_other():
    rng = random.Random(7)
    hashes = [rng.getrandbits(64) for _ in range(1500)]
    for i in range(200):  # planted: 1 to 12 bits flipped, some beyond the distance
        flipped = hashes[i]
        for bit in rng.sample(range(64), rng.randint(1, 12)):
            flipped ^= 1 << bit
        hashes.append(flipped)
    found = set(_near_pairs(hashes, DISTANCE))
    expected = {
        (i, j)
        for i, j in itertools.combinations(range(len(hashes)), 2)
        if distance(hashes[i], hashes[j]) <= DISTANCE
    }
    assert found == expected
    assert len(expected) > 100


def test_copies_near_copies_and_groups_go_to_one_split_transitively():
    """a~b and b~c are near (a and c are not), d has c's bytes, e shares d's patient:
    all five are one group, and so in one split, whatever the fractions."""
    far = 0xFFFF_FFFF_0000_0000
    images = [
        image("a", phash=0),
        image("b", phash=0b111111),  # 6 bits from a
        image("c", phash=0b111111111111, sha="same"),  # 6 from b, 12 from a
        image("d", phash=far, sha="same", group="p1"),
        image("e", phash=far ^ 0xFFFF, group="p1"),
        *(image(f"other{i}") for i in range(40)),
    ]
    plan = plan_splits(images, (0.2, 0.4, 0.4), DISTANCE)
    assert len({plan.splits[uri] for uri in "abcde"}) == 1
    assert plan.info.largest_group == 5
    assert plan.info.groups_kept_together == 1
    assert plan.info.images_in_groups == 5


def synthetic(count=900, seed=3):
    """Images with imbalanced labels, in groups of 1 to 6 that share a label and a pHash
    neighbourhood."""
    rng = random.Random(seed)
    images, number = [], 0
    while number < count:
        label = rng.choices(["cat", "dog", "bird", "fish"], weights=[50, 30, 15, 5])[0]
        base = rng.getrandbits(64)
        for _ in range(rng.randint(1, 6)):
            images.append(
                image(f"/data/{number:05d}.jpg", label, phash=base ^ (1 << rng.randrange(64)))
            )
            number += 1
    return images


def test_each_split_keeps_the_labels_and_the_fractions_of_the_whole():
    plan = plan_splits(synthetic(), FRACTIONS, DISTANCE)
    info = plan.info
    for split, asked in zip(("train", "validation", "test"), FRACTIONS, strict=True):
        assert abs(info.fractions[split] - asked) <= 0.02, info.fractions
        for label, share in info.labels_whole.items():
            assert abs(info.labels[split].get(label, 0) - share) <= 0.03, (
                split,
                label,
                info.labels,
            )
    assert not info.problems
    # What was placed is what the info says.
    counts = collections.Counter(plan.splits.values())
    assert counts["train"] / len(plan.splits) == pytest.approx(info.fractions["train"])


def test_the_plan_does_not_depend_on_the_order_of_the_images():
    images = synthetic(300)
    shuffled = images[:]
    random.Random(1).shuffle(shuffled)
    assert (
        plan_splits(images, FRACTIONS, DISTANCE).splits
        == plan_splits(shuffled, FRACTIONS, DISTANCE).splits
    )


def test_a_daily_run_keeps_every_earlier_split_unless_a_new_copy_joins_two():
    first = synthetic(300)
    earlier = plan_splits(first, FRACTIONS, DISTANCE).splits
    in_train = next(i for i in first if earlier[i.uri] == "train")
    in_test = next(i for i in first if earlier[i.uri] == "test")
    added = [
        *(image(f"/new/{n}.jpg", "dog") for n in range(60)),
        # Near both: joins a TRAIN group and a TEST group.
        image("/new/joiner.jpg", phash=in_train.perceptual_hash, group="joined"),
        image("/new/joiner2.jpg", phash=in_test.perceptual_hash, group="joined"),
    ]
    daily = plan_splits([*first, *added], FRACTIONS, DISTANCE, earlier)
    moved = {row.uri for row in daily.info.moved_listed}
    for uri, split in earlier.items():
        assert daily.splits[uri] == split or uri in moved
    assert moved and daily.info.moved == len(moved)
    assert {row.was for row in daily.info.moved_listed} <= {"train", "test"}
    assert daily.splits["/new/joiner.jpg"] == daily.splits["/new/joiner2.jpg"]
    assert {row.joined_by for row in daily.info.moved_listed} == {"/new/joiner.jpg"}


def test_a_group_the_fractions_cannot_take_is_said():
    """A patient with 60% of the images fits in TRAIN's 80%; one with 90% does not."""
    fits = [image(f"{n}", group="one") for n in range(60)] + [image(f"x{n}") for n in range(40)]
    assert plan_splits(fits, FRACTIONS, DISTANCE).info.problems == ()
    images = [image(f"{n}", group="one") for n in range(90)] + [image(f"x{n}") for n in range(10)]
    plan = plan_splits(images, FRACTIONS, DISTANCE)
    assert plan.info.largest_group == 90
    assert plan.info.fractions["train"] == pytest.approx(0.9)
    assert [problem.split(":")[0] for problem in plan.info.problems] == [
        "train holds 90.0% of the images, not the 80.0% asked"
    ]


# --- whole conversions ------------------------------------------------------------------


def written(output):
    """Each example's (split, its source URI, label, SHA-256, pHash of the stored image)."""
    found = []
    for split in ("train", "validation", "test"):
        for example in read_examples(shard_pattern(output, split)):
            keys = example.features.feature
            stored = Image.open(io.BytesIO(feature(example, IMAGE)))
            found.append(
                (
                    split,
                    feature(example, SOURCE_ID).decode(),
                    # a detection example's labels are its objects'
                    feature(example, CLASS_TEXT if CLASS_TEXT in keys else OBJECT_TEXT),
                    feature(example, IMAGE_SHA256).decode(),
                    perceptual_hash(stored),
                )
            )
    return found


def without_worker_count(files):
    """`published`'s files with the --worker_processes asked taken out of summary.json."""
    del files["summary.json"]["options"]["worker_processes"]
    return files


def leaking_pairs(examples):
    return [
        (a[1], b[1])
        for a, b in itertools.combinations(examples, 2)
        if a[0] != b[0] and (a[3] == b[3] or distance(a[4], b[4]) <= DISTANCE)
    ]


def test_no_copy_pair_or_patient_crosses_splits_read_back_and_the_split_is_the_same_for_any_workers(
    planted, tmp_path
):
    manifest = str(planted / "m.csv")
    flags = ["--manifest", manifest, "--split_by", "groups", "--group_column", "patient"]
    one = convert(tmp_path / "one", *flags, "--worker_processes", "1")
    two = convert(tmp_path / "two", *flags, "--worker_processes", "2")
    examples = written(one)
    assert leaking_pairs(examples) == []
    patients = {row[0]: row[2] for row in csv.reader(open(manifest)) if row[0] != "image_uri"}
    split_of_patient = collections.defaultdict(set)
    for split, uri, *_ in examples:
        split_of_patient[patients[uri.rsplit("/", 1)[-1]]].add(split)
    assert all(len(splits) == 1 for splits in split_of_patient.values()), split_of_patient
    # Byte for byte: every shard, index, list and the report; the options less the count.
    assert without_worker_count(published(two)) == without_worker_count(published(one))
    summary = json.loads((one / "summary.json").read_text())
    assert row_accounting(summary) == [len(patients)] * 3 + [0, 0]
    groups = summary["split_groups"]
    assert groups["images"] == len(patients)
    assert groups["largest_group"] >= 2 and groups["groups_kept_together"] >= 5
    assert sum(groups["fractions"].values()) == pytest.approx(1)
    assert summary["examples_reused"] == len(patients)  # copied from the staging run
    # The URI hash of the same rows does leak: what the grouped split prevents.
    hashed = convert(tmp_path / "hashed", "--manifest", manifest)
    assert leaking_pairs(written(hashed))


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--group_column", "patient"], "--group_column patient: give --split_by groups too"),
        (["--split_by", "groups", "--group_column", "folder:x"], "folder:N takes N >= 1"),
        (
            ["--split_by", "groups", "--group_column", "ward"],
            "has no column 'ward' named by --group_column",
        ),
        (["--split_by", "groups", "--no_wait_until_finish"], "drop --no_wait_until_finish"),
    ],
    ids=["no grouped split", "folder level", "no such column", "no wait"],
)
def test_a_grouping_that_cannot_be_made_stops_before_any_image_is_read(
    planted, tmp_path, capsys, flags, said
):
    from image_tfrecords.pipeline import run

    output = tmp_path / "out"
    code = run.main(["--manifest", str(planted / "m.csv"), "--output_dir", str(output), *flags])
    assert code == run.EXIT_USAGE
    assert said in capsys.readouterr().err
    assert not output.exists()


def test_a_daily_run_keeps_every_image_of_the_earlier_output_in_its_split(planted, tmp_path):
    """Day 2 adds photos (the sample's, turned upside down: new bytes, new pHashes) to
    day 1's rows; with --reuse_from day 1, every day-1 image stays in its split, as read
    back from both outputs, and nothing is listed as moved."""
    flags = ["--split_by", "groups", "--group_column", "patient"]
    day1 = convert(tmp_path / "day1", "--manifest", str(planted / "m.csv"), *flags)
    header, *rows = list(csv.reader(open(planted / "m.csv")))
    rows = [header, *([str(planted / name), *rest] for name, *rest in rows)]
    for number, path in enumerate(sorted((SAMPLE_DATA / "images").glob("*/*.jpg"))[:6]):
        turned = tmp_path / f"new_{number}.jpg"
        Image.open(path).convert("RGB").rotate(180).save(turned, quality=90)
        rows.append([str(turned), path.parent.name, f"new{number}"])
    day2_manifest = tmp_path / "day2.csv"
    with open(day2_manifest, "w", newline="") as file:
        csv.writer(file).writerows(rows)
    day2 = convert(
        tmp_path / "day2", "--manifest", str(day2_manifest), *flags, "--reuse_from", str(day1)
    )
    before = {uri: split for split, uri, *_ in written(day1)}
    after = {uri: split for split, uri, *_ in written(day2)}
    assert {uri: after[uri] for uri in before} == before
    assert len(after) == len(before) + 6
    summary = json.loads((day2 / "summary.json").read_text())
    assert summary["split_groups"]["moved"] == 0
    assert summary["split_groups"]["images"] == len(after)
    assert leaking_pairs(written(day2)) == []


@pytest.mark.parametrize(
    ("manifest", "group", "said"),
    [
        (
            SAMPLE_DATA / "detection" / "voc" / "VOC2007",
            "patient",
            "Pascal VOC annotation XML, which has neither columns nor image attributes",
        ),
        (
            SAMPLE_DATA / "detection" / "coco" / "instances.json",
            "patient",
            "--group_column patient: no image entry of",
        ),
    ],
    ids=["voc", "coco without it"],
)
def test_a_group_column_a_file_does_not_hold_is_refused_before_any_image_is_read(
    tmp_path, capsys, manifest, group, said
):
    """Pascal VOC has no columns or image attributes; no image entry of the COCO file has a
    `patient`: the rows would all be ungrouped, silently."""
    from image_tfrecords.pipeline import run

    flags = ["--label_mode", "detection", "--split_by", "groups", "--group_column", group]
    output = tmp_path / "out"
    assert run.main(["--manifest", str(manifest), "--output_dir", str(output), *flags]) == 2
    assert said in capsys.readouterr().err
    assert not output.exists()


def coco_of(planted, path, attribute="video_id"):
    """The planted set as a COCO instances file: one box over each whole image, its label
    the category, its patient the image entry's `attribute`."""
    rows = list(csv.reader(open(planted / "m.csv")))[1:]
    labels = sorted({label for _, label, _ in rows})
    images, annotations = [], []
    for number, (name, label, patient) in enumerate(rows, start=1):
        width, height = Image.open(planted / name).size
        images.append(
            {"id": number, "file_name": name, "width": width, "height": height, attribute: patient}
        )
        annotations.append(
            {
                "id": number,
                "image_id": number,
                "category_id": labels.index(label) + 1,
                "bbox": [0, 0, width, height],
                "area": width * height,
                "iscrowd": 0,
            }
        )
    categories = [{"id": number, "name": name} for number, name in enumerate(labels, start=1)]
    document = {"images": images, "annotations": annotations, "categories": categories}
    path.write_text(json.dumps(document))
    return path


def test_a_coco_image_attribute_groups_its_images_read_back(planted, tmp_path):
    """--group_column video_id on a COCO file: an attribute of its image entries, as video
    datasets add one; every video's images in one split, and no copy pair across splits."""
    coco = coco_of(planted, tmp_path / "instances.json")
    output = convert(
        tmp_path / "out",
        "--manifest",
        str(coco),
        "--image_dir",
        str(planted),
        "--label_mode",
        "detection",
        "--split_by",
        "groups",
        "--group_column",
        "video_id",
    )
    images = json.loads(coco.read_text())["images"]
    video = {entry["file_name"]: entry["video_id"] for entry in images}
    examples = written(output)
    splits_of_video = collections.defaultdict(set)
    for split, uri, *_ in examples:
        splits_of_video[video[uri.rsplit("/", 1)[-1]]].add(split)
    assert len(examples) == len(video)
    assert all(len(splits) == 1 for splits in splits_of_video.values()), splits_of_video
    assert len({split for splits in splits_of_video.values() for split in splits}) > 1
    assert leaking_pairs(examples) == []


def test_a_coco_image_attribute_that_is_not_a_value_is_refused_naming_the_image(planted, tmp_path):
    from image_tfrecords.core.inputs.coco import image_attributes
    from image_tfrecords.core.inputs.rows import ManifestError, RowRules

    coco = coco_of(planted, tmp_path / "instances.json")
    document = json.loads(coco.read_text())
    document["images"][3]["video_id"] = ["p1", "p2"]
    coco.write_text(json.dumps(document))
    rules = RowRules(image_dir=str(planted))
    with pytest.raises(ManifestError, match=r'image id 4: its video_id is \["p1", "p2"\]'):
        list(image_attributes(str(coco), rules, "video_id", None))
    del document["images"][3]["video_id"]  # an image without one is in no declared group
    coco.write_text(json.dumps(document))
    found = dict(image_attributes(str(coco), rules, "video_id", None))
    assert len(found) == len(document["images"]) - 1
    assert all(uri.startswith(str(planted)) for uri in found)


def test_a_failed_staging_run_keeps_the_files_its_error_names(tmp_path, capsys):
    """Every image missing: the staging run fails, and the dead letters and FAILED.json
    its error names are still there (the staging folder is kept, and said)."""
    from image_tfrecords.pipeline import run

    manifest = tmp_path / "m.csv"
    manifest.write_text("".join(f"gone/{number}.jpg,cat\n" for number in range(4)))
    output = tmp_path / "out"
    argv = ["--manifest", str(manifest), "--output_dir", str(output), "--split_by", "groups"]
    assert run.main([*argv, "--temp_location", str(tmp_path / "temp")]) == run.EXIT_FAILED
    err = capsys.readouterr().err
    assert "the grouped split's staging run" in err and str(tmp_path / "temp") in err
    named = re.findall(r"(/\S+\.json(?:l)?)\b", err.split("error:", 1)[1])
    assert named and all(os.path.exists(path) for path in named), err
    assert not output.exists()


def test_an_image_folder_splits_by_groups(tmp_path):
    """An image folder's rows have no split column: its staging run's `--split_column
    none` was once refused as a column of a manifest. The output's own near-copy list
    (the job's search, over every example) pairs no two splits.

    Not `leaking_pairs`: that hashes each stored image whole, where the job hashes the
    decode it checks (a JPEG's at 1/8 scale): cat_14.jpg and cat_11.gif are 10 bits apart
    whole and 12 as the job hashes them, so they may part."""
    output = convert(
        tmp_path / "out", "--image_folder", str(SAMPLE_DATA / "images"), "--split_by", "groups"
    )
    summary = json.loads((output / "summary.json").read_text())
    assert summary["split_groups"]["images"] == summary["examples_written"] > 0
    pairs = [
        json.loads(line)
        for path in output.glob("near_duplicates-*.jsonl")
        for line in path.read_text().splitlines()
    ]
    assert pairs and all(pair["copy"]["split"] == pair["kept"]["split"] for pair in pairs)
