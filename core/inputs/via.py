"""VGG Image Annotator (VIA) 1 and 2, recognised and refused by name (RefusedFormat): its
project file (`_via_settings`, `_via_img_metadata`), its JSON export (an object of images,
each with `filename` and `regions`: a list in VIA 2, an object keyed "0", "1"... in VIA 1)
and its CSV export (`filename,file_size,file_attributes,region_count,region_id,
region_shape_attributes,region_attributes`; VIA 1 writes the header `#filename,...`, as
its own test data does: ox-vgg/via, via-1.x.y/tests/data/unit_test_annotation1.csv). Read
as Vertex AI JSON Lines or a CSV manifest, each row was a dead letter; VIA exports COCO
itself, which is read.
"""

from __future__ import annotations

import io

import ijson

from image_tfrecords.core.inputs.input_format import FileHead, RefusedFormat
from image_tfrecords.core.records.documents import DocumentError, json_events

_PROJECT_KEYS = frozenset({"_via_settings", "_via_img_metadata", "_via_attributes"})
_CSV_HEADER = b"filename,file_size,file_attributes,region_count,region_id"


class ViaFormat(RefusedFormat):
    name = "via"
    title = "a VGG Image Annotator (VIA) project or export"
    suffixes = (".json", ".csv")
    refusal = (
        "export it from VIA as COCO (Annotation > Export Annotations (COCO format)) and "
        "pass that JSON with --label_mode detection"
    )

    def recognises(self, head: FileHead) -> bool:
        if (
            head.data.lstrip().removeprefix(b"#").startswith(_CSV_HEADER)
            or head.first_json_key in _PROJECT_KEYS
        ):
            return True
        first = _first_value(head.data)
        return isinstance(first, dict) and {"filename", "regions"} <= set(first)


def _first_value(data: bytes) -> object:
    """The first value of the JSON object `data` starts with, where it ends in `data`."""
    try:
        return next((value for _, value in ijson.kvitems(json_events(io.BytesIO(data)), "")), None)
    except (ijson.JSONError, DocumentError):
        return None
