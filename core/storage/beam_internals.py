"""Checks of what a replacement of a Beam internal relies on, made on the Beam installed.

image-tfrecords replaces a few of Beam's internals: HDFS listing and rename and the S3
client (core/storage/beam_filesystems.py), the credential cache for gs:// without
credentials (core/storage/gcs_access.py), two lookups made again and again while a graph
is built (pipeline/beam_lookups.py). setup.py admits every Beam release from 2.69 to 3,
and Beam promises nothing about its private names between releases, so no replacement is
tied to a version string: each states what it relies on, with these checks, and is
installed only where that holds. What they check is shape, read with inspect (or a
helper tried on a sample):

- a function that is replaced takes the parameters its replacement takes (names and
  kinds; defaults and annotations aside), since Beam's code calls the replacement as it
  called its own;
- a function that is called takes the arguments the replacement passes, and a helper
  whose answer it uses gives the expected one on a sample (no server asked);
- an attribute is there, or a function's own code names what the replacement stands in
  for (a global it reads, an attribute it sets).

A check that fails raises Unfit, whose message names what the installed Beam has instead
of what was expected; the caller says what the run does without the replacement. Whether
the replacement still behaves as it should is for the tests (tests/test_beam_filesystems.py,
tests/test_beam_lookups.py, tests/test_gcs_access.py), which run on each Beam CI installs.

Free of Beam: it inspects what it is given (a worker process imports core/storage/).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any


class Unfit(Exception):
    """What a replacement relies on, missing or changed on the Beam installed."""


def beam_version() -> str:
    """'Beam 2.xx.y', as the warnings name the Beam installed."""
    import apache_beam  # noqa: PLC0415 - only where a check failed

    return f"Beam {apache_beam.__version__}"


def attribute(owner: Any, name: str, where: str) -> Any:
    """`owner`'s attribute `name`; Unfit, naming it `where`.`name`, if it has none."""
    try:
        return getattr(owner, name)
    except AttributeError:
        raise Unfit(f"{where}.{name} is missing") from None


def same_parameters(where: str, beams: Callable, ours: Callable) -> None:
    """Beam's function `beams` (named `where`) and `ours`, which replaces it, take the same
    parameters: Beam's callers, by position or by name, then call ours as they did its own."""
    found, expected = parameters(where, beams), parameters(where, ours)
    if found != expected:
        raise Unfit(f"{where} has parameters ({found}), expected ({expected})")


def takes(where: str, function: Callable, *args: Any, **kwargs: Any) -> None:
    """`function` (named `where`) can be called with `args` and `kwargs`, as the
    replacement calls it."""
    try:
        inspect.signature(function).bind(*args, **kwargs)
    except TypeError as error:
        raise Unfit(f"{where} has parameters ({parameters(where, function)}): {error}") from None


def names(where: str, function: Callable, wanted: Iterable[str]) -> None:
    """`function`'s own code (named `where`) names each of `wanted`: a global it reads, an
    attribute it reads or sets. For a replacement that stands in for what a function of
    Beam's reads rather than for the function."""
    code = getattr(inspect.unwrap(getattr(function, "__func__", function)), "__code__", None)
    if code is None:
        raise Unfit(f"{where} is not a Python function")
    missing = [name for name in wanted if name not in code.co_names]
    if missing:
        raise Unfit(f"{where} no longer uses {', '.join(missing)}")


def parameters(where: str, function: Callable) -> str:
    """`function`'s parameters as a signature writes them, without defaults or annotations
    ('self, url', 'self, *paths'); Unfit if it has no signature."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        raise Unfit(f"{where} has no signature to read") from None
    bare = signature.replace(
        parameters=[
            parameter.replace(default=parameter.empty, annotation=parameter.empty)
            for parameter in signature.parameters.values()
        ],
        return_annotation=signature.empty,
    )
    return str(bare)[1:-1]  # with its / and * marks, less the brackets


def gives(where: str, call: Callable[[], Any], expected: Any) -> None:
    """`call()`, named `where` as the call it makes, returns `expected`: a helper of Beam's
    that the replacement calls, tried on a sample."""
    try:
        found = call()
    except Exception as error:  # noqa: BLE001 - whatever it raises, it is not the shape used
        raise Unfit(f"{where} raised {error!r}") from None
    if found != expected:
        raise Unfit(f"{where} gives {found!r}, expected {expected!r}")
