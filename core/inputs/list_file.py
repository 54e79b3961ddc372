"""Space-separated list files, recognised and refused by name (RefusedFormat): Oxford-IIIT
Pet's `annotations/list.txt` and `trainval.txt` (`Abyssinian_100 1 1 1`: an image name
without its folder or suffix, then its class, species and breed ids) and their like. Read
as a CSV manifest, each line was a dead letter: they hold no split, no image path, and
classes only as ids.
"""

from __future__ import annotations

import re

from image_tfrecords.core.inputs.input_format import FileHead, RefusedFormat

# An image name, then one to four whole numbers.
_LINE = re.compile(r"[^\s,;]+(?: +-?\d+){1,4}")
_LINES_SEEN = 5


class ListFileFormat(RefusedFormat):
    name = "list_file"
    title = "a space-separated list file (as Oxford-IIIT Pet's list.txt)"
    suffixes = (".txt",)
    refusal = (
        "its lines name images without their folder or suffix and give classes as ids; "
        "write a CSV manifest (split,image_uri,label) from it, or lay the images out in "
        "class folders for --image_folder"
    )

    def recognises(self, head: FileHead) -> bool:
        """Its first lines that are not # comments are all `name id...`."""
        lines = [
            line.strip()
            for line in head.data.decode("utf-8", "replace").splitlines()[:100]
            if line.strip() and not line.startswith("#")
        ][:_LINES_SEEN]
        return bool(lines) and all(_LINE.fullmatch(line) for line in lines)
