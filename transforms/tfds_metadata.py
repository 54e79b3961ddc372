"""The files TensorFlow Datasets reads, so `tfds.builder_from_directory(OUTPUT)` loads an
output as it is: dataset_info.json (splits, shard lengths, our shard file names),
features.json (each key of summary.json's `features` as a TFDS feature) and a
`<key>.labels.txt` of label names per ClassLabel key.

TFDS reads tfrecord files without compression only, so an output written with
`--compression gzip` gets none of these files. TFDS reads ArrayRecord shards through
`builder.as_data_source()` (random access), not `as_dataset()`. Image keys become `Image` features
decoded to RGB; label ids become `ClassLabel`s named by the vocabulary (detection ids are
1-based, so their names start with a background entry); instance masks a Sequence of
one-channel Images, a segmentation map a one-channel Image; detection boxes stay four float
lists, not TFDS's `BBoxFeature` (one [ymin, xmin, ymax, xmax] tensor per box under one key).
"""

import json
from typing import Any

from image_tfrecords.core.records.choices import LabelMode, UnseenLabel
from image_tfrecords.core.records.feature_keys import (
    CLASS_LABEL,
    IMAGE,
    LABEL_ID_BASE,
    MASKS,
    SEGMENTATION,
    is_image_key,
)
from image_tfrecords.core.records.label_map import UNSEEN_LABEL_NAME
from image_tfrecords.core.records.naming import (
    DATASET_INFO_FILE,
    FEATURES_FILE,
    LABELS_SUFFIX,
    TFDS_FILEPATH_TEMPLATE,
)
from image_tfrecords.core.records.summary import FeatureInfo, Summary

BACKGROUND_NAME = "[background]"  # detection's id 0, which no object has

_FEATURE = "tensorflow_datasets.core.features"
_TFDS_DTYPES = {"bytes": "string", "int64": "int64", "float": "float32"}


def tfds_metadata(summary: Summary) -> dict[str, str]:
    """File name -> text of the TFDS metadata for the output `summary` describes; empty
    where TFDS cannot read the shards (gzip TFRecord)."""
    file_format = summary.options.shard_format
    if not file_format.tfds_reads:
        return {}
    features = summary.features
    info: dict[str, Any] = {
        "name": "image_tfrecords",
        "version": "1.0.0",
        "description": f"image-tfrecords output, label mode {summary.options.label_mode}"
        "; see summary.json",
        "fileFormat": file_format.tfds_name,
        "splits": [
            {
                "name": split,
                "numBytes": stats.bytes,
                "shardLengths": [shard.records for shard in stats.shards],
                "filepathTemplate": TFDS_FILEPATH_TEMPLATE,
            }
            for split, stats in summary.splits.items()
            if stats.shards
        ],
    }
    label = next((key for key in LABEL_ID_BASE if key in features), None)
    if IMAGE in features and CLASS_LABEL in features:
        info["supervisedKeys"] = {
            "tuple": {"items": [{"featureKey": IMAGE}, {"featureKey": label}]}
        }
    names = label_names(summary)
    files = {
        DATASET_INFO_FILE: info,
        FEATURES_FILE: {
            "pythonClassName": f"{_FEATURE}.features_dict.FeaturesDict",
            "featuresDict": {
                "features": {
                    key: _feature(key, feature, len(names)) for key, feature in features.items()
                }
            },
        },
    }
    texts = {name: json.dumps(value, indent=2, ensure_ascii=False) for name, value in files.items()}
    if label:  # TFDS names the file after the key, '/' -> '.'
        texts[label.replace("/", ".") + LABELS_SUFFIX] = "".join(f"{n}\n" for n in names)
    return texts


def label_names(summary: Summary) -> list[str]:
    """The name of each label id, from id 0."""
    background = [BACKGROUND_NAME] if summary.options.label_mode is LabelMode.DETECTION else []
    unseen = [UNSEEN_LABEL_NAME] if summary.options.unseen_label is UnseenLabel.OOV else []
    return [*background, *summary.labels, *unseen]


def _feature(key: str, feature: FeatureInfo, num_classes: int) -> dict[str, Any]:
    """features.json's entry for one key: lists as a Sequence of their element."""
    if is_image_key(key, feature):
        return _image(channels=1 if key == SEGMENTATION else 3)
    if key == MASKS:
        element = _image(channels=1)
    elif key in LABEL_ID_BASE:
        element = {
            "pythonClassName": f"{_FEATURE}.class_label_feature.ClassLabel",
            "classLabel": {"numClasses": num_classes},
        }
    else:
        element = {
            "pythonClassName": f"{_FEATURE}.tensor_feature.Tensor",
            "tensor": {"shape": {}, "dtype": _TFDS_DTYPES[feature.dtype], "encoding": "none"},
        }
    if not feature.list:
        return element
    return {
        "pythonClassName": f"{_FEATURE}.sequence_feature.Sequence",
        "sequence": {"feature": element, "length": -1},
    }


def _image(channels: int) -> dict[str, Any]:
    return {
        "pythonClassName": f"{_FEATURE}.image_feature.Image",
        "image": {"shape": {"dimensions": [-1, -1, channels]}, "dtype": "uint8"},
    }
