"""The package's layers (pyproject.toml's [tool.importlinter] contracts): the core imports
neither the pipeline, the transforms nor the reader library; the reader library neither
the pipeline nor the transforms; the transforms not the pipeline; the worker pool nothing
of what it runs; a worker process's own code (core/worker, core/records) neither Beam nor
TensorFlow. import-linter reads the package from one folder, so it is given the
package laid out as a wheel installs it (the checkout's pipeline/, transforms/ and core/
are mapped beneath image_tfrecords by setup.py's package_dir)."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The subpackages setup.py's package_dir maps from the repository's top-level folders.
MAPPED = ("pipeline", "transforms", "core")


def installed_layout(folder: Path) -> Path:
    """A copy of the package's code under folder/image_tfrecords, as a wheel lays it out."""
    ignore = shutil.ignore_patterns("__pycache__")
    package = folder / "image_tfrecords"
    shutil.copytree(_source_of("image_tfrecords"), package, ignore=ignore)
    for name in MAPPED:
        shutil.copytree(_source_of(f"image_tfrecords.{name}"), package / name, ignore=ignore)
    return folder


def lint_imports(folder: Path) -> subprocess.CompletedProcess:
    """import-linter's verdict on the package under `folder`: exit 0 when every contract
    is kept."""
    return subprocess.run(
        [
            str(Path(sys.executable).with_name("lint-imports")),
            "--config",
            str(ROOT / "pyproject.toml"),
            "--no-cache",
        ],
        cwd=folder,
        env={"PYTHONPATH": str(folder), "PATH": ""},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_every_layer_contract_is_kept(tmp_path):
    result = lint_imports(installed_layout(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_an_import_that_runs_up_breaks_a_contract(tmp_path):
    """The check is no formality: the core importing the pipeline is found, by name."""
    layout = installed_layout(tmp_path)
    naming = layout / "image_tfrecords" / "core" / "records" / "naming.py"
    naming.write_text(naming.read_text() + "\nfrom image_tfrecords.pipeline import options\n")
    result = lint_imports(layout)
    assert result.returncode == 1
    assert (
        "image_tfrecords.core.records.naming -> image_tfrecords.pipeline.options" in result.stdout
    ), result.stdout


def test_a_core_role_importing_a_role_above_it_breaks_the_roles_contract(tmp_path):
    """core's folders are layered too: the records importing the worker's code is found."""
    layout = installed_layout(tmp_path)
    settings = layout / "image_tfrecords" / "core" / "records" / "run_settings.py"
    settings.write_text(
        settings.read_text() + "\nfrom image_tfrecords.core.worker import shard_writer\n"
    )
    result = lint_imports(layout)
    assert result.returncode == 1
    said = " ".join(result.stdout.split())  # lint-imports wraps its lines
    assert "image_tfrecords.core.records is not allowed to import" in said
    assert (
        "image_tfrecords.core.records.run_settings -> image_tfrecords.core.worker.shard_writer"
        in said
    ), result.stdout


def test_a_worker_module_importing_beam_breaks_the_worker_contract(tmp_path):
    """A worker process's own code imports neither Beam nor TensorFlow: an import of
    either, even inside a function, is found by name."""
    layout = installed_layout(tmp_path)
    images = layout / "image_tfrecords" / "core" / "imaging" / "images.py"
    images.write_text(images.read_text() + "\ndef _f():\n    import apache_beam\n")
    result = lint_imports(layout)
    assert result.returncode == 1
    assert "image_tfrecords.core.imaging.images -> apache_beam" in result.stdout, result.stdout


def _source_of(package: str) -> Path:
    """The folder `package` is imported from (the checkout's, through the editable
    install)."""
    spec = importlib.util.find_spec(package)
    return Path(next(iter(spec.submodule_search_locations)))


def test_the_design_pages_table_of_roles_is_cores_folders_in_the_contracts_order():
    """docs/design.md's table of core/'s roles lists every folder of core/, no other, in
    the order of the roles contract's layers (issue 56: folder = role, as documented)."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (roles,) = [c for c in contracts["contracts"] if c["id"] == "roles"]
    folders = {path.parent.name for path in (ROOT / "core").glob("*/__init__.py")}
    page = (ROOT / "docs" / "design.md").read_text()
    table = re.findall(r"^\| `core/(\w+)/` \|", page, flags=re.M)
    assert sorted(table) == sorted(folders)
    assert table == roles["layers"]
