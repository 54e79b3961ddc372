"""What writing instance masks costs: `image-tfrecords convert` on a COCO file whose
annotations hold polygons, with masks and with `--leave_out masks`, against the loop a
user writes today with the Object Detection API's create_coco_tf_record steps
(`--include_masks`: pycocotools' RLE of each polygon, decoded, saved as a PNG by Pillow,
one process, one TFRecord).

The image set is make_dataset.py's (crops of real photos, reused when present); each
image gets OBJECTS objects, each a random star-shaped polygon of POINTS points inside its
box. The three tools run alternately, --rounds times each, as child processes; after
round 1 ours must have written, image by image, the very mask PNGs the loop wrote (else
exit 1). Prints the medians (wall seconds, images/s) and the ratios, and writes every run
to --json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
VENV_BIN = BENCH.parent / ".venv" / "bin"
OBJECTS = 4
POINTS = 16

# The baseline, as a script its own process runs: create_coco_tf_record's mask steps.
_LOOP = """
import hashlib, io, json, sys
import numpy as np, PIL.Image, tensorflow as tf
from pycocotools import mask
coco, out = json.load(open(sys.argv[1])), sys.argv[2]
by_image = {}
for annotation in coco["annotations"]:
    by_image.setdefault(annotation["image_id"], []).append(annotation)
names = {category["id"]: category["name"].encode() for category in coco["categories"]}
def floats(values): return tf.train.Feature(float_list=tf.train.FloatList(value=values))
def ints(values): return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
def strings(values): return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
with tf.io.TFRecordWriter(out) as writer:
    for image in coco["images"]:
        data = open(image["file_name"], "rb").read()
        PIL.Image.open(io.BytesIO(data)).load()
        width, height = image["width"], image["height"]
        boxes, pngs, labels, texts = [], [], [], []
        for annotation in by_image.get(image["id"], []):
            x, y, w, h = annotation["bbox"]
            boxes.append((x / width, y / height, (x + w) / width, (y + h) / height))
            binary = np.amax(mask.decode(mask.frPyObjects(annotation["segmentation"],
                                                          height, width)), axis=2)
            png = io.BytesIO()
            PIL.Image.fromarray(binary).save(png, format="PNG")
            pngs.append(png.getvalue())
            labels.append(annotation["category_id"])
            texts.append(names[annotation["category_id"]])
        feature = {"image/encoded": strings([data]), "image/format": strings([b"jpeg"]),
                   "image/height": ints([height]), "image/width": ints([width]),
                   "image/key/sha256": strings([hashlib.sha256(data).hexdigest().encode()]),
                   "image/object/class/label": ints(labels),
                   "image/object/class/text": strings(texts), "image/object/mask": strings(pngs),
                   **{f"image/object/bbox/{side}": floats([box[place] for box in boxes])
                      for place, side in enumerate(("xmin", "ymin", "xmax", "ymax"))}}
        writer.write(tf.train.Example(features=tf.train.Features(feature=feature))
                     .SerializeToString())
"""


def make_coco(folder: Path, images: int) -> Path:
    """make_dataset.py's crops, and a COCO file of star polygons over them."""
    import numpy as np
    from PIL import Image

    dataset = folder / f"crops-{images}"
    if not (dataset / "manifest.csv").exists():
        subprocess.run(
            [
                str(VENV_BIN / "python"),
                str(BENCH / "make_dataset.py"),
                "--out",
                str(dataset),
                "--images",
                str(images),
            ],
            check=True,
        )
    rng = np.random.default_rng(0)
    entries, annotations = [], []
    for number, path in enumerate(sorted(dataset.glob("images/*/*.jpg")), start=1):
        with Image.open(path) as image:
            width, height = image.size
        entries.append({"id": number, "file_name": str(path), "width": width, "height": height})
        for _ in range(OBJECTS):
            w, h = rng.uniform(0.2, 0.5) * width, rng.uniform(0.2, 0.5) * height
            x, y = rng.uniform(0, width - w), rng.uniform(0, height - h)
            turns = np.sort(rng.uniform(0, 2 * math.pi, POINTS))
            reach = rng.uniform(0.5, 1.0, POINTS)
            polygon = [
                value
                for turn, r in zip(turns, reach)
                for value in (
                    x + w / 2 * (1 + r * math.cos(turn)),
                    y + h / 2 * (1 + r * math.sin(turn)),
                )
            ]
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": number,
                    "category_id": 1 + len(annotations) % 3,
                    "iscrowd": 0,
                    "bbox": [x, y, w, h],
                    "segmentation": [polygon],
                }
            )
    path = folder / f"coco-{images}.json"
    path.write_text(
        json.dumps(
            {
                "images": entries,
                "annotations": annotations,
                "categories": [
                    {"id": index, "name": name}
                    for index, name in enumerate(("a", "b", "c"), start=1)
                ],
            }
        )
    )
    return path


# Run in a child, as the tools are: image file name -> its mask PNGs, from one output.
_MASKS_OF = """
import glob, json, sys, tensorflow as tf
found = {}
for path in sorted(glob.glob(sys.argv[1])):
    for record in tf.data.TFRecordDataset(path):
        feature = tf.train.Example.FromString(record.numpy()).features.feature
        found[feature["image/key/sha256"].bytes_list.value[0].decode()] = [
            mask.hex() for mask in feature["image/object/mask"].bytes_list.value]
print(json.dumps(found))
"""


def same_masks(work: Path) -> bool:
    """Whether ours wrote, image by image (by SHA-256), the loop's mask PNGs."""

    def masks(pattern: str) -> dict:
        done = subprocess.run(
            [str(VENV_BIN / "python"), "-c", _MASKS_OF, pattern],
            check=True,
            capture_output=True,
            text=True,
        )
        return json.loads(done.stdout)

    ours, loop = (
        masks(str(work / "out" / "ours" / "train-*.tfrecord")),
        masks(str(work / "out" / "loop.tfrecord")),
    )
    return bool(ours) and ours == loop


def run(tool: str, coco: Path, out: Path) -> float:
    commands = {
        "ours": [
            str(VENV_BIN / "image-tfrecords"),
            "convert",
            "--manifest",
            f"train={coco}",
            "--label_mode",
            "detection",
            "--output_dir",
            str(out),
            "--overwrite",
        ],
        "ours_leave_out_masks": [
            str(VENV_BIN / "image-tfrecords"),
            "convert",
            "--manifest",
            f"train={coco}",
            "--label_mode",
            "detection",
            "--output_dir",
            str(out),
            "--overwrite",
            "--leave_out",
            "masks",
        ],
        "loop": [str(VENV_BIN / "python"), "-c", _LOOP, str(coco), str(out) + ".tfrecord"],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    subprocess.run(commands[tool], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--work", default="/tmp/image-tfrecords-masks-bench")
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", default=str(BENCH / "masks-results.json"))
    args = parser.parse_args()
    work = Path(args.work)
    coco = make_coco(work, args.images)
    tools = ["ours", "ours_leave_out_masks", "loop"]
    walls: dict[str, list[float]] = {tool: [] for tool in tools}
    for round_number in range(args.rounds):
        for tool in tools[round_number % 3 :] + tools[: round_number % 3]:
            walls[tool].append(run(tool, coco, work / "out" / tool))
            print(f"round {round_number + 1} {tool}: {walls[tool][-1]:.1f} s", flush=True)
        if round_number == 0 and not same_masks(work):
            sys.exit("ours did not write the loop's masks")
    medians = {tool: statistics.median(values) for tool, values in walls.items()}
    result = {
        "started": datetime.datetime.now(datetime.UTC).isoformat(),
        "machine": f"{platform.processor() or platform.machine()}, "
        f"{len(__import__('os').sched_getaffinity(0))} cores",
        "python": sys.version.split()[0],
        "images": args.images,
        "objects_per_image": OBJECTS,
        "polygon_points": POINTS,
        "walls": walls,
        "images_per_second": {tool: args.images / wall for tool, wall in medians.items()},
        "ratios": {
            "ours/loop": medians["ours"] / medians["loop"],
            "ours/ours_leave_out_masks": medians["ours"] / medians["ours_leave_out_masks"],
        },
    }
    Path(args.json).write_text(json.dumps(result, indent=2))
    for tool, wall in medians.items():
        print(f"{tool:22} {wall:7.1f} s  {args.images / wall:7.1f} images/s")
    print(json.dumps(result["ratios"]))


if __name__ == "__main__":
    main()
