"""The feature keys of an output's examples that more than the shard writer names, declared
once: core/worker/examples.py writes them (and gives every key its dtype), the reader library
(image_tfrecords/output.py, loader.py, verify.py, report.py, inspection.py) reads them and
transforms/tfds_metadata.py describes them to TFDS.

Classification examples carry `image/class/*`; detection examples the Object Detection
API's `image/object/*`, with class ids 1-based as that API expects (0 is its background
class); a segmentation map is in DeepLab's key.
"""

from __future__ import annotations

from image_tfrecords.core.records.summary import FeatureInfo

# The image, as TensorFlow's own datasets key it; an image --schema column is `<column>/*`.
IMAGE = "image/encoded"  # the image and label `as_supervised` and TFDS pair
HEIGHT = "image/height"
WIDTH = "image/width"
FILENAME = "image/filename"  # the source file's name
SOURCE_ID = "image/source_id"  # the image's URI
IMAGE_SHA256 = "image/key/sha256"  # of the stored image's bytes, in hex

CLASS_LABEL = "image/class/label"  # one id per label: a list for multi-label rows
CLASS_TEXT = "image/class/text"  # one text per label, in the same order

# One value per object, in the same order in every list.
BOX = "image/object/bbox/"  # + xmin, ymin, xmax, ymax
OBJECT_LABEL = "image/object/class/label"  # label id + 1
OBJECT_TEXT = "image/object/class/text"
MASKS = "image/object/mask"  # a PNG of 0s and 1s per object, at the image's size
KEYPOINT = "image/object/keypoint/"  # + x, y, visibility (K per object), num, text

SEGMENTATION = "image/segmentation/class/encoded"  # a PNG of class indices (DeepLab's key)
SEGMENTATION_FORMAT = "image/segmentation/class/format"

# Keys that hold ids of the label vocabulary -> the id of its first entry (detection ids
# are 1-based, as the Object Detection API keeps 0 for the background).
LABEL_ID_BASE = {CLASS_LABEL: 0, OBJECT_LABEL: 1}
# Each label-id key's companion that holds the label as written.
LABEL_TEXT = {CLASS_LABEL: CLASS_TEXT, OBJECT_LABEL: OBJECT_TEXT}


def is_image_key(key: str, feature: FeatureInfo) -> bool:
    """An image file's bytes: a single bytes value under a key ending in `/encoded`
    (`image/encoded`, as in TensorFlow's own datasets)."""
    return key.endswith("/encoded") and feature.dtype == "bytes" and not feature.list
