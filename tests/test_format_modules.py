"""Each input format's knowledge stays in its own module, core/inputs/<format>.py: the
rest of the code asks the formats through InputFormat (core/inputs/input_format.py) and
the registry (core/inputs/sources.py's FORMATS, the one place that lists them), so that
adding a format is one module and one line. Read from the source, not run: ~0.2 s."""

from __future__ import annotations

import ast
from pathlib import Path

from source_trees import parse, parsed

from image_tfrecords.core.inputs.sources import FORMATS, MANIFEST_FORMATS

ROOT = Path(__file__).resolve().parents[1]
INPUTS = ROOT / "core" / "inputs"
REGISTRY = INPUTS / "sources.py"
# The modules that hold a format (an InputFormat subclass FORMATS lists).
FORMAT_MODULES = {type(format).__module__ for format in FORMATS.values()}
# The keys --input_format takes; not --image_folder's, which is the option's own name.
_FORMAT_NAMES = set(MANIFEST_FORMATS)


def _module_name(path: Path) -> str:
    """The installed name of a file of the checkout (setup.py's package_dir)."""
    relative = path.relative_to(ROOT).with_suffix("")
    parts = (
        relative.parts
        if relative.parts[0] == "image_tfrecords"
        else ("image_tfrecords", *relative.parts)
    )
    return ".".join(parts)


def _code_files() -> list[Path]:
    return sorted(
        path
        for folder in ("pipeline", "transforms", "core", "image_tfrecords")
        for path in (ROOT / folder).rglob("*.py")
    )


# Every module but the formats' own (and the registry, which imports them).
GENERIC = [
    path for path in _code_files() if _module_name(path) not in FORMAT_MODULES and path != REGISTRY
]


def _imported_modules(tree: ast.AST) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_the_formats_are_found_as_modules():
    assert len(FORMAT_MODULES) == len(FORMATS) > 10
    assert len(GENERIC) > 50


def test_no_module_but_a_formats_own_imports_or_names_a_format():
    problems = []
    for path, tree in parsed(GENERIC).items():
        imported = sorted(_imported_modules(tree) & FORMAT_MODULES)
        if imported:
            problems.append(f"{path.relative_to(ROOT)} imports {', '.join(imported)}")
        named = sorted(
            {
                node.value
                for node in ast.walk(tree)
                if isinstance(node, ast.Constant) and node.value in _FORMAT_NAMES
            }
        )
        if named:
            problems.append(f"{path.relative_to(ROOT)} names the format {', '.join(named)}")
    assert not problems, (
        "ask the formats through InputFormat (a hook with a default) and "
        "keep what is a format's own in its module: " + "; ".join(problems)
    )


def test_the_registry_holds_no_format_key_and_imports_the_formats_classes():
    """What it imports of a format's module is its InputFormat class; and --image_folder's
    class folders, what a folder is where no format's folder_reading claims it."""
    tree = parse(REGISTRY)
    assert not {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in _FORMAT_NAMES
    }
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module in FORMAT_MODULES
        for alias in node.names
    }
    assert imported == {type(format).__name__ for format in FORMATS.values()} | {"class_folders"}
