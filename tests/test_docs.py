"""The documentation site (mkdocs.yml, docs/): its reference pages are the code's, it builds
with warnings as errors (every internal link and anchor checked), its pages load in
headless Chromium, and every command on the getting-started page runs on a fresh checkout.
"""

from __future__ import annotations

import ast
import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from source_trees import parsed

ROOT = Path(__file__).resolve().parent.parent
DOCS_VENV = ROOT / ".venv-docs"
CHROMIUM = "/usr/bin/chromium"
CODE = ("core", "pipeline", "transforms", "image_tfrecords")


def test_the_reference_pages_are_what_the_code_generates_now():
    """docs/reference/ is written from the CLI's parser, the writer's feature schema, the
    dead-letter registry and summary.json's model: a change to any of them without
    `.venv/bin/python docs/gen_reference.py` fails here."""
    result = subprocess.run(
        [sys.executable, "docs/gen_reference.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr


def _emitted_reasons() -> set[str]:
    """Every reason code the code can give a dead letter, read from the source: the
    arguments that are reasons (to dead_letter(), DeadLetter(), ImageRejected() (the pool's
    lost images too), the downloads' failures) where they are string literals or
    named constants, and every constant of the modules that hold reasons."""
    from image_tfrecords.core.imaging import images
    from image_tfrecords.core.inputs import folder
    from image_tfrecords.core.records import dead_letters

    found = {
        value
        for name, value in vars(dead_letters).items()
        if name.isupper() and isinstance(value, str) and name != "HTTP_STATUS"
    }
    found |= set(images.REASONS)
    found |= {folder.NOT_IN_LABEL_FOLDER, folder.NOT_IN_SPLIT_FOLDER, folder.LABEL_IS_SPLIT_NAME}
    position = {
        "dead_letter": 0,
        "ImageRejected": 0,
        "DownloadFailed": 0,
        "_Retryable": 0,
        "DeadLetter": 5,
    }
    code_files = (path for package in CODE for path in (ROOT / package).rglob("*.py"))
    for path, tree in parsed(code_files).items():
        constants = {
            node.targets[0].id: node.value.value
            for node in tree.body
            if isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
            if name not in position or len(node.args) <= position[name]:
                continue
            argument = node.args[position[name]]
            if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                found.add(argument.value)
            elif isinstance(argument, ast.JoinedStr):
                head = argument.values[0]
                assert isinstance(head, ast.Constant) and head.value == "http_", (
                    f"{path}:{node.lineno}: a reason made at run time"
                )
                found.add(dead_letters.HTTP_STATUS)
            elif (
                isinstance(argument, ast.Attribute)
                and getattr(argument.value, "id", "") == "reasons"
            ):
                found.add(getattr(dead_letters, argument.attr))
            elif isinstance(argument, ast.Name) and argument.id in constants:
                found.add(constants[argument.id])
    return found


def test_every_dead_letter_reason_the_code_can_emit_is_in_the_registry_and_no_other():
    from image_tfrecords.core.records import dead_letters

    emitted = _emitted_reasons()
    assert "decode_crash" in emitted and "not_in_split_folder" in emitted  # the scan works
    assert emitted - set(dead_letters.REGISTRY) == set()
    assert set(dead_letters.REGISTRY) - emitted == set()
    assert all(meaning.strip() for meaning in dead_letters.REGISTRY.values())


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built by `mkdocs build --strict` (a broken link or anchor is an error)."""
    mkdocs = DOCS_VENV / "bin" / "mkdocs"
    if not mkdocs.exists():
        pytest.fail(
            f"{mkdocs} is missing: `make docs` (or `make test`) installs it from "
            "docs/requirements.txt"
        )
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNING" not in result.stderr, result.stderr
    return out


def test_the_site_builds_with_warnings_as_errors(site):
    for page in (
        "index.html",
        "getting-started.html",
        "reference/options.html",
        "reference/features.html",
        "reference/dead-letters.html",
        "operations/index.html",
        "faq.html",
        "images/report.png",
    ):
        assert (site / page).exists(), page


def test_a_broken_link_fails_the_build(tmp_path):
    """The validation settings are what make links checked: a page linking to a page or
    anchor that does not exist fails `mkdocs build --strict`."""
    mkdocs = DOCS_VENV / "bin" / "mkdocs"
    if not mkdocs.exists():
        pytest.fail(f"{mkdocs} is missing: `make docs` installs it")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path)
    for broken in ("[x](no-such-page.md)", "[x](getting-started.md#no-such-anchor)"):
        (tmp_path / "docs" / "faq.md").write_text(f"# FAQ\n\n{broken}\n", encoding="utf-8")
        result = subprocess.run(
            [str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        )
        assert result.returncode != 0, broken
        assert "faq.md" in result.stderr, result.stderr


@pytest.fixture(scope="module")
def served(site):
    """The built site on a local HTTP server, as a person would browse it."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _dom(url: str, profile: Path) -> str:
    """The page as headless Chromium renders it (flags as tests/test_report_page.py's)."""
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed: `make test` installs it")
    result = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--virtual-time-budget=3000",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize(
    "page, title",
    [
        ("index.html", "image-tfrecords"),
        ("getting-started.html", "Getting started"),
        ("operations/index.html", "What was run for real"),
        ("reference/dead-letters.html", "Dead-letter reasons"),
    ],
)
def test_pages_load_in_chromium_with_their_title_and_the_nav(served, page, title, tmp_path):
    dom = _dom(f"{served}/{page}", tmp_path / "profile")
    heading = re.search(r"<h1[^>]*>(.*?)</h1>", dom, re.S)
    assert heading and title in re.sub(r"<[^>]+>", "", heading.group(1)), page
    nav = re.search(r'<nav class="md-nav md-nav--primary".*', dom, re.S)
    assert nav, page
    text = re.sub(r"<[^>]+>", " ", nav.group(0))
    for entry in (
        "Getting started",
        "Input guides",
        "What is written",
        "Operations",
        "Performance",
        "Design",
        "FAQ",
        "convert options",
        "Feature keys",
        "Dead-letter reasons",
    ):
        assert entry in text, (page, entry)


# --- every command on the getting-started page, on a fresh checkout ---------------------

_BLOCK = re.compile(r"(?:<!-- (not run|run instead): ([^\n]*?) -->\n)?```(\w*)\n(.*?)```", re.S)


def _blocks(page: str) -> list[tuple[str, str, str, str]]:
    """(marker, its text, language, code) of each fenced block of the page, in order."""
    return [match.groups("") for match in _BLOCK.finditer(page)]


def test_the_getting_started_page_marks_every_block_it_does_not_run():
    blocks = _blocks((ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8"))
    assert {language for _, _, language, _ in blocks} <= {"bash", "python", "text"}
    for marker, why, _language, code in blocks:
        if marker == "not run":
            assert len(why) > 20, "say why it is not run"
            compile(code, "getting-started.md", "exec")  # a python block still parses


# The files the page says each command writes, checked after the command.
_WRITES = {
    "make demo": [
        "demo-output/summary.json",
        "demo-output/report.html",
        "demo-output/train-00000-of-00001.tfrecord",
        "demo-output/errors-00000-of-00001.jsonl",
    ],
    "image-tfrecords convert --manifest my-data.csv --output_dir my-output\n": [
        "my-data.csv",
        "my-output/summary.json",
        "my-output/report.html",
        "my-output/train-00000-of-00001.tfrecord",
        "my-output/train-00000-of-00001.tfrecord.idx",
        "my-output/validation-00000-of-00001.tfrecord",
        "my-output/test-00000-of-00001.tfrecord",
        "my-output/transform_fn/saved_model.pb",
    ],
    "inspect my-output": ["look/records.csv"],
    "--output_dir my-output-ar": [
        "my-output-ar/summary.json",
        "my-output-ar/train-00000-of-00001.array_record",
    ],
}
# What each command's output must say.
_SAYS = {
    "verify my-output": "ok: 12 examples in 3 shards",
    'ds = image_tfrecords.load("my-output"': "(4, 64, 64, 3)",
    "examples/train_keras.py demo-output": "validation accuracy",
    'output = "my-output-ar"': "(4, 64, 64, 3)",
}


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A `git clone` of this repository's HEAD, with the real .venv linked in (nothing is
    reinstalled: the clone's requirements.txt, setup.py and pyproject.toml get an old time
    so that .venv/.installed stays newer for make) and the clone's own code first on the
    path."""
    if not (ROOT / ".venv" / ".installed").exists():
        pytest.fail(".venv is not installed: run make test")
    clone = tmp_path_factory.mktemp("checkout") / "image-tfrecords"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, timeout=120)
    (clone / ".venv").symlink_to(ROOT / ".venv")
    # (Else make demo would reinstall, pointing the shared .venv's editable install here.)
    for stamped in ("requirements.txt", "setup.py", "pyproject.toml"):
        os.utime(clone / stamped, (0, 0))
    return clone


def test_every_command_on_the_getting_started_page_runs_on_a_fresh_checkout(checkout):
    page = (checkout / "docs" / "getting-started.md").read_text(encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(checkout), "TF_CPP_MIN_LOG_LEVEL": "2"}
    ran = []
    for marker, why, language, code in _blocks(page):
        if language == "text" or marker == "not run":
            continue
        if marker == "run instead":
            command = ["bash", "-euo", "pipefail", "-c", why.split(" (")[0]]
        elif language == "bash":
            command = ["bash", "-euo", "pipefail", "-c", code]
        else:
            command = [str(checkout / ".venv" / "bin" / "python"), "-c", code]
        result = subprocess.run(
            command, cwd=checkout, env=env, capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, f"{code}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        if marker == "run instead":  # make test, dry: its recipe ends in the test suite
            # (Under an outer make, as in CI, make says where it enters and leaves.)
            recipe = [line for line in result.stdout.splitlines() if not line.startswith("make[")]
            assert "-m pytest tests" in recipe[-1], result.stdout
        for key, files in _WRITES.items():
            if key in code:
                missing = [name for name in files if not (checkout / name).exists()]
                assert not missing, (code, missing)
        for key, says in _SAYS.items():
            if key in code:
                assert says in result.stdout, (code, result.stdout[-2000:])
        ran.append(code)
    assert len(ran) == 8, ran  # the page's commands, every one
    # The shared .venv still runs this checkout's code (its editable install was not
    # pointed at the clone, where the later tests would find no job server jar).
    where = subprocess.run(
        [
            str(ROOT / ".venv" / "bin" / "python"),
            "-c",
            "import image_tfrecords.core; print(image_tfrecords.core.__file__)",
        ],
        cwd=ROOT.parent,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": ""},
    ).stdout
    assert where.startswith(str(ROOT / "core")), where
    assert all(any(key in code for code in ran) for key in [*_WRITES, *_SAYS])
