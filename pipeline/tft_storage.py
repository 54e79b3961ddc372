"""Where tf.Transform may keep its working files: a place TensorFlow's own filesystems
write (tf.io.gfile), not Beam's. TensorFlow 2.21 writes local paths and gs://; s3:// left
TensorFlow for tensorflow-io in 2.6, and hdfs:// is there only in builds that register
it. A --temp_location TensorFlow cannot write made the run create its folders in the
bucket through Beam, then fail in tf.Transform's analysis ("File system scheme 's3' not
implemented"): here it is refused before anything is made.

TensorFlow is imported only for a location with a scheme: a local path needs no check,
and the usage errors before it come back in a second, not six.
"""

from __future__ import annotations

import re

_SCHEME = re.compile(r"^([a-zA-Z][-a-zA-Z0-9+.]*)://")  # as Beam's FileSystems.get_scheme
_LOCAL = frozenset({"", "file"})
_NOT_SHARED = frozenset({"ram"})  # TensorFlow's in-memory filesystem: one process's own
# For messages given before TensorFlow is loaded (pipeline/engines.py).
WHAT_WORKS = "a shared mount, or gs://...; not s3://, which TensorFlow's filesystems cannot write"


def tensorflow_location_problem(option: str, location: str | None) -> str | None:
    """Why `location`, given as --`option`, cannot hold tf.Transform's working files;
    None when it can (or is not given)."""
    found = _SCHEME.match(location or "")
    if found is None:
        return None
    scheme = found.group(1).lower()
    writable = tensorflow_schemes()
    if scheme in writable:
        return None
    buckets = ", ".join(f"{name}://..." for name in sorted(writable - _LOCAL))
    return (
        f"--{option} {location}: tf.Transform writes its working files there through "
        f"TensorFlow's filesystems, which cannot write {scheme}:// here; give a local "
        f"folder (on a cluster, a mount every worker shares)"
        + (f" or {buckets}" if buckets else "")
    )


def tensorflow_schemes() -> frozenset[str]:
    """The schemes TensorFlow's filesystems write in this process, local ones included."""
    import tensorflow as tf  # noqa: PLC0415 - TensorFlow loads only where its filesystems are asked for

    return frozenset(tf.io.gfile.get_registered_schemes()) - _NOT_SHARED
