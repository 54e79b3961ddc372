"""Python API: `image_tfrecords.convert(source, output_dir, **options)` and `df.tfrecords`.

    import image_tfrecords
    result = image_tfrecords.convert("data.csv", "out/", num_shards=4)
    result = df.tfrecords.to_tfrecords("out/", runner="DirectRunner")   # a pandas DataFrame

Options are the command line's, as keyword arguments (`max_side=512`, `overwrite=True`,
any Beam option too). Importing this package registers the DataFrame accessor (when
pandas is imported, before or after).

Reading the output back: `load()` (a tf.data.Dataset), `Output.read()` (its metadata).

The package's subpackages: `pipeline` (the Beam job and the command line), `transforms`
(its composite transforms), `core` (the Beam-free work of the worker processes). Every
one of them is imported through this file, the shard writers too, so it imports nothing
itself: the names above are imported on first use (TensorFlow for load and Output; Beam
only when a conversion starts), pandas' accessor when pandas is.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from image_tfrecords.conversion import ConversionResult, convert
    from image_tfrecords.core.records.summary import Summary
    from image_tfrecords.loader import load
    from image_tfrecords.output import Output

__all__ = ["ConversionResult", "Output", "Summary", "convert", "load"]

# The folder this package is imported from (a checkout, or a venv's site-packages): what
# `--version` names, and first on a worker process's PYTHONPATH (a launcher may have it on
# sys.path only).
CODE_FOLDER = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_MODULE_OF = {
    "ConversionResult": "conversion",
    "convert": "conversion",
    "load": "loader",
    "Output": "output",
    "Summary": "core.records.summary",
}


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # TensorFlow's informational lines, as the command line hides them: I and W lines once
    # its logging is set up (unless the user says otherwise), and the lines its libraries
    # write as they load, before it is (TF_CPP_MIN_LOG_LEVEL does not reach those).
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from image_tfrecords.core.launcher.console import quiet_console  # noqa: PLC0415

    with quiet_console():
        value = getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


class _AccessorWhenPandasLoads(importlib.abc.MetaPathFinder):
    """Registers `df.tfrecords` once pandas has loaded, so that neither the command line
    nor a shard writer pays pandas' import (0.4 s, 50 MB) for an accessor it never uses."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "pandas":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            load_pandas = spec.loader.exec_module

            def exec_module(module: Any) -> None:
                load_pandas(module)
                importlib.import_module(f"{__name__}.conversion")  # registers the accessor

            spec.loader.exec_module = exec_module
        return spec


if "pandas" in sys.modules:
    importlib.import_module(f"{__name__}.conversion")
else:
    sys.meta_path.insert(0, _AccessorWhenPandasLoads())
