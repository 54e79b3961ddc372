"""The install docs/install.md gives for any Python 3.11 environment, done on a fresh venv:
a wheel built from the checkout, installed with requirements.txt's pins as constraints,
then `image-tfrecords --version` and the sample job, run from a folder outside the
checkout with nothing of it on the path, so that every module and data file the converter
needs must have come from the wheel.

The wheel is built with pip, as the page says. It is installed with uv (the Makefile's
UV_PIN, which installs every pinned set of the project) rather than pip, for time: the same
wheel and the same constraints, and the test checks that the installed set is exactly
requirements.txt's pins, as `pip install` resolves it (checked by hand when the pins change: see
docs/development.md). uv takes 5 s from its cache (20 s without); pip takes 95 s on CI's
machine, where its cache keeps none of the 1 GB it downloads.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from source_trees import install_requires, parsed

ROOT = Path(__file__).resolve().parent.parent
# The folders setup.py packages (as templates/flex/Dockerfile copies them), and where each
# is installed: beneath the one package, image_tfrecords (setup.py's package_dir).
INSTALLED_AS = {
    "image_tfrecords": "image_tfrecords",
    "pipeline": "image_tfrecords/pipeline",
    "transforms": "image_tfrecords/transforms",
    "core": "image_tfrecords/core",
}
CODE = tuple(INSTALLED_AS)
_TIMEOUT_S = 600  # a cold uv cache downloads about 1 GB


def _run(*command, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=_TIMEOUT_S,
    )
    assert result.returncode == 0, f"{command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def _pins(text: str) -> dict[str, str]:
    """NAME==VERSION lines (a requirements file's, comments aside), by canonical name."""
    return {
        canonicalize_name(name): version
        for name, version in re.findall(r"^([\w.-]+)==([^\s#]+)", text, re.MULTILINE)
    }


def _source_copy(into: Path) -> Path:
    """setup.py and the code folders, as a checkout has them (no build/ of an earlier
    build, whose stale files setuptools would put in the wheel)."""
    into.mkdir()
    shutil.copy(ROOT / "setup.py", into)
    shutil.copy(ROOT / "pyproject.toml", into)
    for folder in CODE:
        shutil.copytree(
            ROOT / folder, into / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
    return into


def test_the_wheel_installs_into_a_fresh_venv_and_runs_the_sample_job_outside_the_checkout(
    tmp_path,
):
    source = _source_copy(tmp_path / "checkout")
    venv, dist, elsewhere = tmp_path / "venv", tmp_path / "dist", tmp_path / "elsewhere"
    elsewhere.mkdir()
    _run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    _run(venv / "bin" / "pip", "wheel", "--no-deps", "--wheel-dir", dist, ".", cwd=source)
    [wheel] = dist.glob("image_tfrecords-*.whl")
    packaged = set(zipfile.ZipFile(wheel).namelist())
    code_files = {
        f"{INSTALLED_AS[folder]}/{path.relative_to(source / folder).as_posix()}"
        for folder in CODE
        for path in (source / folder).rglob("*")
        if path.is_file()
    }
    assert code_files - packaged == set()  # report_page.html too
    # One top-level name, so that nothing of a user's own (a pipeline/ folder, a
    # transforms module beside a training script) is shadowed or shadows the converter.
    assert {name.split("/")[0] for name in packaged} == {
        "image_tfrecords",
        wheel.name.split("-py3")[0] + ".dist-info",
    }

    _run(
        sys.executable,
        "-m",
        "uv",
        "pip",
        "install",
        "--compile-bytecode",  # as docs/install.md says: pip would, uv does not by default
        "--python",
        venv / "bin" / "python",
        wheel,
        "-c",
        ROOT / "requirements.txt",
        cwd=tmp_path,
    )
    _run(
        sys.executable,
        "-m",
        "uv",
        "pip",
        "check",
        "--python",
        venv / "bin" / "python",
        cwd=tmp_path,
    )
    listed = _run(
        venv / "bin" / "python",
        "-c",
        "import importlib.metadata as m; print('\\n'.join(sorted("
        "d.metadata['Name'] + '==' + d.version for d in m.distributions())))",
        cwd=elsewhere,
    ).stdout
    installed = _pins(listed)
    top_level = _run(
        venv / "bin" / "python",
        "-c",
        "import importlib.metadata as m; print(sorted(name for name, dists in "
        "m.packages_distributions().items() if 'image-tfrecords' in dists))",
        cwd=elsewhere,
    ).stdout
    assert top_level.strip() == "['image_tfrecords']"
    assert installed.pop("image-tfrecords") == "0.1.0"
    installed.pop("pip")  # the venv's own
    assert installed == _pins((ROOT / "requirements.txt").read_text(encoding="utf-8"))

    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    command = venv / "bin" / "image-tfrecords"
    version = _run(command, "--version", cwd=elsewhere, env=env).stdout
    site_packages = next((venv / "lib").glob("python3.*/site-packages"))
    assert version.startswith(f"image-tfrecords 0.1.0 from {site_packages} (Python 3.11")
    job = _run(
        command,
        "convert",
        "--manifest",
        ROOT / "sample_data" / "manifest.csv",
        "--output_dir",
        "demo-output",
        "--max_error_fraction",
        "0.25",
        cwd=elsewhere,
        env=env,
    )
    assert "rows read 50 = 43 examples written + 7 dead-lettered" in job.stdout, job.stdout
    summary = json.loads((elsewhere / "demo-output" / "summary.json").read_text())
    assert summary["versions"]["image-tfrecords"] == "0.1.0"
    assert (elsewhere / "demo-output" / "report.html").stat().st_size > 0


def _install_requires() -> list[Requirement]:
    return [Requirement(requirement) for requirement in install_requires(ROOT / "setup.py")]


def _imported_modules() -> set[str]:
    """Every module the code folders import, by its first two names (google.auth)."""
    found = set()
    code_files = (path for folder in CODE for path in (ROOT / folder).rglob("*.py"))
    for tree in parsed(code_files).values():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                found.add(node.module)
    return {
        ".".join(module.split(".")[:2])
        for module in found
        if module.split(".")[0] not in (*CODE, *sys.stdlib_module_names)
    }


@functools.cache
def _top_level_names() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def _distributions_of(module: str) -> set[str]:
    """The installed distributions that hold `module`; of a namespace package's (google.*),
    those with its folder."""
    candidates = _top_level_names().get(module.split(".")[0], [])
    if len(candidates) > 1:
        folder = module.replace(".", "/") + "/"
        candidates = [
            name
            for name in candidates
            if any(
                str(file).startswith(folder) for file in importlib.metadata.distribution(name).files
            )
        ]
    return {canonicalize_name(name) for name in candidates}


def test_setup_py_declares_every_library_the_code_imports_in_ranges_that_admit_the_pins():
    declared = {
        canonicalize_name(requirement.name): requirement for requirement in _install_requires()
    }
    holders = {module: _distributions_of(module) for module in _imported_modules()}
    undeclared = {module: names for module, names in holders.items() if not names & declared.keys()}
    assert undeclared == {}
    pins = _pins((ROOT / "requirements.txt").read_text(encoding="utf-8"))
    refused = {
        name: (str(requirement.specifier), pins.get(name))
        for name, requirement in declared.items()
        if pins.get(name) not in requirement.specifier
    }
    assert refused == {}
