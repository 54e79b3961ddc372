"""The compatibility tier's venvs (`make compat`): what setup.py admits, installed as a user
gets it, with no constraints file, into fresh venvs under .venv-compat/:

- py3.11-newest: the oldest Python setup.py admits, the newest versions of everything;
- py3.13-newest: the newest Python it admits, the same;
- py3.11-oldest-beam: Python 3.11 with the oldest Beam it admits (setup.py's floor, read
  from its install_requires here, with its extras), everything else the newest that fits.

`python tests/compat/venvs.py` (the main .venv's: it has the pinned uv) builds them all,
anew every time (yesterday's venv would test yesterday's releases): one wheel of the
package, built as `pip install .` builds it, then each venv made by the Python's own
`venv` and given the wheel by `uv pip install --compile-bytecode` (pip compiles by default)
with no constraints, the venvs at once (their installs wait on the network and the
disk). uv resolves as pip does: the highest version of each package that fits every
requirement, for the venv's own interpreter, no pre-releases; only where a conflict
makes them backtrack may the two pick differently, so what each venv got is recorded:
.venv-compat/NAME/versions.json (the versions the tests name a failure with, and the
install's time) and freeze.txt (every distribution). tests/compat/test_compat.py runs
the tier on them.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))  # run as a script too (make compat)
from source_trees import install_requires  # noqa: E402

COMPAT = ROOT / ".venv-compat"
MAIN_VENV = ROOT / ".venv"
UV = MAIN_VENV / "bin" / "uv"
PYENV_ROOT = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
# pyenv's interpreters, as CI's machines have them; COMPAT_PYTHON_3_11 (_3_13) name others.
PYTHONS = {
    "3.11": Path(
        os.environ.get("COMPAT_PYTHON_3_11", PYENV_ROOT / "versions" / "3.11.7" / "bin" / "python")
    ),
    "3.13": Path(
        os.environ.get("COMPAT_PYTHON_3_13", PYENV_ROOT / "versions" / "3.13.0" / "bin" / "python")
    ),
}
# What a failure names each venv by: its Python and these distributions' versions.
NAMED = (
    "apache-beam",
    "tensorflow",
    "tensorflow-transform",
    "tfx-bsl",
    "numpy",
    "pyarrow",
    "pillow",
    "protobuf",
)
# The folders setup.py packages (tests/test_install.py's CODE), and its two build files.
SOURCES = ("setup.py", "pyproject.toml", "image_tfrecords", "pipeline", "transforms", "core")
_INSTALL_TIMEOUT_S = 900  # a cold uv cache downloads about 1 GB a venv


def beam_floor() -> str:
    """setup.py's Beam requirement with its lower bound made the pin:
    `apache-beam[gcp,aws,hadoop]>=2.69,<3` gives `apache-beam[gcp,aws,hadoop]==2.69`."""
    from packaging.requirements import Requirement

    [beam] = [
        Requirement(text)
        for text in install_requires(ROOT / "setup.py")
        if Requirement(text).name == "apache-beam"
    ]
    [floor] = [spec.version for spec in beam.specifier if spec.operator == ">="]
    extras = f"[{','.join(sorted(beam.extras))}]" if beam.extras else ""
    return f"apache-beam{extras}=={floor}"


@dataclasses.dataclass(frozen=True)
class Venv:
    """One venv of the tier: its name, its Python and what it pins beyond the wheel."""

    name: str
    python: str  # a key of PYTHONS
    pins: tuple[str, ...] = ()

    @property
    def path(self) -> Path:
        return COMPAT / self.name

    def bin(self, script: str) -> Path:
        return self.path / "bin" / script

    def versions(self) -> dict:
        """versions.json: {"python": ..., NAME: version for NAMED, "install_s": ...}."""
        recorded = self.path / "versions.json"
        if not recorded.exists():
            raise FileNotFoundError(f"{recorded} is missing: `make compat` builds the venvs")
        return json.loads(recorded.read_text())

    def description(self) -> str:
        """The venv's name and versions, as a failure names them."""
        try:
            versions = self.versions()
        except FileNotFoundError as missing:
            return f"{self.name} ({missing})"
        named = ", ".join(f"{name} {versions.get(name)}" for name in NAMED)
        return f"{self.name} (Python {versions['python']}, {named})"


def venvs() -> list[Venv]:
    """The tier's venvs; COMPAT_VENVS (names, space-separated) chooses some of them."""
    every = [
        Venv("py3.11-newest", "3.11"),
        Venv("py3.13-newest", "3.13"),
        Venv("py3.11-oldest-beam", "3.11", (beam_floor(),)),
    ]
    chosen = os.environ.get("COMPAT_VENVS", "").split()
    unknown = set(chosen) - {venv.name for venv in every}
    if unknown:
        raise SystemExit(f"COMPAT_VENVS names no venv of the tier: {sorted(unknown)}")
    return [venv for venv in every if not chosen or venv.name in chosen]


def _run(command: list, log, **kwargs) -> None:
    log.write(f"$ {' '.join(map(str, command))}\n")
    log.flush()
    subprocess.run(
        [str(part) for part in command],
        stdout=log,
        stderr=subprocess.STDOUT,
        check=True,
        timeout=_INSTALL_TIMEOUT_S,
        **kwargs,
    )


def build_wheel(into: Path) -> Path:
    """The package's wheel, as `pip install .` builds it (setuptools, in isolation), from
    a copy of the checkout's sources: setuptools puts whatever an earlier build left in
    build/ into the wheel, and three builds of one folder at once would share it."""
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "source"
        source.mkdir()
        for name in SOURCES:
            if (ROOT / name).is_dir():
                shutil.copytree(
                    ROOT / name,
                    source / name,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
                )
            else:
                shutil.copy(ROOT / name, source)
        with open(into / "wheel.log", "w") as log:
            _run([UV, "build", "--wheel", "--out-dir", into, source], log)
    [wheel] = into.glob("image_tfrecords-*.whl")
    return wheel


_VERSIONS = (
    "import importlib.metadata as m, json, platform; "
    "print(json.dumps({'python': platform.python_version(), "
    "**{name: m.version(name) for name in %r}}))"
)


def install(venv: Venv, wheel: Path) -> dict:
    """A fresh venv with the wheel and its pins; returns its versions.json."""
    started = time.monotonic()
    python = PYTHONS[venv.python]
    if not python.exists():
        raise SystemExit(
            f"{venv.name}: no Python {venv.python} at {python} (pyenv's; set "
            f"COMPAT_PYTHON_{venv.python.replace('.', '_')} to another)"
        )
    shutil.rmtree(venv.path, ignore_errors=True)
    venv.path.parent.mkdir(parents=True, exist_ok=True)
    with open(COMPAT / f"{venv.name}.log", "w") as log:
        _run([python, "-m", "venv", venv.path], log)
        # No constraints file: the newest versions setup.py (and the pins) admit today.
        _run(
            [
                UV,
                "pip",
                "install",
                "--compile-bytecode",
                "--python",
                venv.bin("python"),
                wheel,
                *venv.pins,
            ],
            log,
        )
        _run([UV, "pip", "check", "--python", venv.bin("python")], log)
        freeze = subprocess.run(
            [str(UV), "pip", "freeze", "--python", str(venv.bin("python"))],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    (venv.path / "freeze.txt").write_text(freeze)
    versions = json.loads(
        subprocess.run(
            [str(venv.bin("python")), "-c", _VERSIONS % (NAMED,)],
            capture_output=True,
            text=True,
            check=True,
            cwd=venv.path,
        ).stdout
    )
    versions["install_s"] = round(time.monotonic() - started, 1)
    (venv.path / "versions.json").write_text(json.dumps(versions, indent=2) + "\n")
    return versions


def main() -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    chosen = venvs()
    COMPAT.mkdir(exist_ok=True)
    started = time.monotonic()
    dist = COMPAT / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    dist.mkdir()
    wheel = build_wheel(dist)
    print(f"compat: built {wheel.name} in {time.monotonic() - started:.0f} s", flush=True)
    failed = []
    with concurrent.futures.ThreadPoolExecutor(len(chosen)) as pool:
        installs = {venv: pool.submit(install, venv, wheel) for venv in chosen}
        for venv, done in installs.items():
            try:
                versions = done.result()
            except subprocess.CalledProcessError as error:
                log = (COMPAT / f"{venv.name}.log").read_text()
                failed.append(venv.name)
                pins = " ".join(venv.pins) or "no pins"
                print(
                    f"compat: {venv.name} (Python {venv.python}, {pins}) failed to install: "
                    f"{' '.join(map(str, error.cmd[:3]))} exited {error.returncode}; the end "
                    f"of {COMPAT / venv.name}.log:\n{log[-4000:]}",
                    file=sys.stderr,
                )
                continue
            print(f"compat: {venv.description()} in {versions['install_s']:.0f} s", flush=True)
    print(f"compat: the venvs in {time.monotonic() - started:.0f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
