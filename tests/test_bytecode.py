"""Installs compile bytecode: every installed module a conversion imports, in its launcher
and in its worker processes, has an up-to-date .pyc, so a machine where Python may not write
bytecode (PYTHONDONTWRITEBYTECODE=1: many Docker images, CI) does not compile Beam and
TensorFlow again in every process (~7 s each; bench/RESULTS.md, issue 53, has the demo's
conversion timed both ways).

A failure here means the install step stopped compiling (the Makefile's UV_INSTALL, the
compileall of the checkout); a venv made before it compiled: `make clean`, then `make`.
The checkout's own modules are left out: the one a developer just edited is stale until
it runs where Python may write bytecode, and they are small.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

OUR_FOLDERS = ("core", "pipeline", "transforms", "image_tfrecords")  # setup.py's package_dir
# What the command's launcher and a worker process import before the first row.
IMPORTED_BY_A_CONVERSION = """
import json, sys
import image_tfrecords.pipeline.cli, image_tfrecords.pipeline.run, image_tfrecords.pipeline.graph
import image_tfrecords.core.worker.pool, image_tfrecords.core.worker.shard_writer
print(json.dumps([getattr(m, "__file__", None) for m in list(sys.modules.values())]))
"""


def stale_or_missing(source: str) -> bool:
    """Whether Python would have to compile `source` (its cached .pyc is missing or
    records another mtime or size)."""
    try:
        with open(importlib.util.cache_from_source(source), "rb") as cached:
            header = cached.read(16)
    except FileNotFoundError:
        return True
    if int.from_bytes(header[4:8], "little") & 1:  # hash-based: Python checks it itself
        return False
    stat = os.stat(source)
    return (
        int.from_bytes(header[8:12], "little") != int(stat.st_mtime) & 0xFFFFFFFF
        or int.from_bytes(header[12:16], "little") != stat.st_size & 0xFFFFFFFF
    )


def test_every_module_a_conversion_imports_has_its_bytecode():
    found = subprocess.run(
        [sys.executable, "-c", IMPORTED_BY_A_CONVERSION],
        env=os.environ | {"PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    checkout = Path(__file__).resolve().parent.parent
    ours = tuple(f"{checkout / folder}{os.sep}" for folder in OUR_FOLDERS)
    sources = [
        path
        for path in json.loads(found.stdout)
        if path and path.endswith(".py") and not path.startswith(ours)
    ]
    assert len(sources) > 1000  # Beam, TensorFlow, tf.Transform, Pillow...
    uncompiled = [path for path in sources if stale_or_missing(path)]
    assert not uncompiled, f"{len(uncompiled)} of {len(sources)} uncompiled: {uncompiled[:10]}"
