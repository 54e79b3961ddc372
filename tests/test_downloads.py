"""Images at http(s) URLs (core/storage/downloads.py), against a web server this test starts on
the loopback address: retries on 5xx, 429 (with Retry-After) and cut connections, a
timeout per request, a size limit, per-reason dead letters, the User-Agent, concurrent
downloads inside each worker process and their per-host limit, and the storage probe."""

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import encode, photo_like, read_examples
from storage_servers import HOST, Behaviour, ImageServer, free_port

from image_tfrecords.core.inputs.rows import resolve_uri
from image_tfrecords.core.storage.downloads import (
    MAX_REDIRECTS,
    DownloadFailed,
    DownloadSettings,
    download,
)
from image_tfrecords.core.storage.redaction import redact_urls, redacted
from image_tfrecords.pipeline import run


@pytest.fixture
def server():
    files = {
        f"/img/{name}.jpg": encode(photo_like(24, 16, seed), "JPEG")
        for seed, name in enumerate(("good", "flaky", "throttled", "stalled", "cut", "huge"))
    }
    files["/img/page.jpg"] = b"<html>not an image</html>"
    image_server = ImageServer(files)
    yield image_server
    image_server.close()


def manifest(tmp_path, server, names, label="cat"):
    (tmp_path / "m.csv").write_text(
        "".join(f"train,{server.url}/img/{name}.jpg,{label}\n" for name in names)
    )
    return str(tmp_path / "m.csv")


def dead_letters(output):
    return {
        json.loads(line)["uri"].rsplit("/", 1)[-1]: json.loads(line)
        for path in output.glob("errors-*.jsonl")
        for line in path.read_text().splitlines()
    }


def test_urls_convert_with_retries_and_a_dead_letter_per_reason(server, tmp_path):
    server.behaviours = {
        "/img/flaky.jpg": Behaviour(status=503, times=2),
        "/img/throttled.jpg": Behaviour(status=429, times=1, retry_after="1"),
        # Stalled past the timeout; the timeout leaves a loaded machine's answers time.
        "/img/stalled.jpg": Behaviour(stall_s=6),
        "/img/cut.jpg": Behaviour(cut=True),
        "/img/huge.jpg": Behaviour(declared=10 << 20),
    }
    names = ["good", "flaky", "throttled", "stalled", "cut", "huge", "page", "missing"]
    output = tmp_path / "out"
    assert (
        run.main(
            [
                "--manifest",
                manifest(tmp_path, server, names),
                "--output_dir",
                str(output),
                "--download_timeout",
                "2",
                "--download_retries",
                "2",
                "--max_download_mb",
                "1",
                "--max_error_fraction",
                "1",
            ]
        )
        == 0
    )
    summary = json.loads((output / "summary.json").read_text())
    assert (summary["rows_read"], summary["examples_written"], summary["rows_dead_lettered"]) == (
        8,
        3,
        5,
    )
    written = sorted(
        example.features.feature["image/source_id"].bytes_list.value[0].decode()
        for example in read_examples(f"{output}/train-*.tfrecord")
    )
    assert written == sorted(
        f"{server.url}/img/{name}.jpg" for name in ("good", "flaky", "throttled")
    )
    letters = dead_letters(output)
    assert {name: letter["reason"] for name, letter in letters.items()} == {
        "stalled.jpg": "http_timeout",
        "cut.jpg": "connection_error",
        "huge.jpg": "too_large",
        "page.jpg": "not_an_image",
        "missing.jpg": "http_404",
    }
    assert "(after 3 tries)" in letters["stalled.jpg"]["message"]
    assert letters["missing.jpg"]["message"] == f"HTTP 404: {server.url}/img/missing.jpg"
    assert len(server.times_asked("/img/flaky.jpg")) == 3  # two 503s, then the image
    first, second = server.times_asked("/img/throttled.jpg")
    assert second - first >= 1.0  # Retry-After: 1 honoured
    assert len(server.times_asked("/img/missing.jpg")) == 1  # a 404 is not retried
    assert {agent for _, _, agent, _ in server.requests} == {DownloadSettings().user_agent}
    assert DownloadSettings().user_agent.startswith("image-tfrecords/")


def test_each_worker_downloads_concurrently_within_its_per_host_limit(tmp_path):
    files = {f"/img/{index}.jpg": encode(photo_like(16, 12, index), "JPEG") for index in range(24)}
    for per_host, at_most in ((16, None), (2, 2)):
        image_server = ImageServer(files, latency_s=0.3)
        try:
            names = [str(index) for index in range(24)]
            output = tmp_path / f"out-{per_host}"
            assert (
                run.main(
                    [
                        "--manifest",
                        manifest(tmp_path, image_server, names),
                        "--output_dir",
                        str(output),
                        "--worker_processes",
                        "1",
                        "--num_shards",
                        "1",
                        "--download_threads",
                        "8",
                        "--downloads_per_host",
                        str(per_host),
                    ]
                )
                == 0
            )
            if at_most is None:  # the shard's 8 readers at once, not one by one
                assert image_server.most_at_once >= 6
            else:
                assert image_server.most_at_once <= at_most
        finally:
            image_server.close()


def test_a_host_that_does_not_answer_stops_the_run_before_the_job(tmp_path, capsys):
    """Said naming the URL, without its credentials."""
    uri = f"http://{HOST}:{free_port()}/img/a.jpg"
    secret = uri.replace("http://", "http://reader:hunter2@") + "?sig=c0ffee"
    (tmp_path / "m.csv").write_text(f"train,{secret},cat\n")
    assert (
        run.main(["--manifest", str(tmp_path / "m.csv"), "--output_dir", str(tmp_path / "out")])
        == run.EXIT_USAGE
    )
    error = capsys.readouterr().err
    shown = uri.replace("http://", "http://REDACTED@") + "?sig=REDACTED"
    assert error.startswith(f"error: cannot use the storage: {shown}: cannot connect")
    assert "hunter2" not in error and "c0ffee" not in error


def test_a_missing_first_url_is_no_storage_problem(server, tmp_path):
    """A 404 is the row's problem (a dead letter), not the server's."""
    output = tmp_path / "out"
    assert (
        run.main(
            [
                "--manifest",
                manifest(tmp_path, server, ["missing", "good"]),
                "--output_dir",
                str(output),
                "--max_error_fraction",
                "0.5",
            ]
        )
        == 0
    )
    assert json.loads((output / "summary.json").read_text())["examples_written"] == 1


def test_a_body_larger_than_allowed_without_a_declared_size_is_too_large(server):
    server.files["/img/big.jpg"] = b"x" * 5000
    with pytest.raises(DownloadFailed) as failed:
        download(f"{server.url}/img/big.jpg", DownloadSettings(max_bytes=1000))
    assert failed.value.reason == "too_large"


def test_urls_are_kept_as_written():
    """A web server, not a file system, says what a URL's path and query name."""
    url = "https://cdn.example.com/a/../b//c.jpg?size=large&x=1//2"
    assert resolve_uri(url, "/data") == url


def test_a_label_map_or_schema_at_a_url_is_read_through_storage(server):
    from image_tfrecords.core.storage import storage

    server.files["/labels.txt"] = b"cat\ndog\n"
    with storage.open_read(f"{server.url}/labels.txt") as file:
        assert file.read() == b"cat\ndog\n"
    with pytest.raises(FileNotFoundError):
        storage.open_read(f"{server.url}/no-such-file.txt")
    assert storage.size(f"{server.url}/labels.txt") == 8


def test_resume_reuses_finished_shards_without_downloading_again(server, tmp_path, capsys):
    """A run that failed its error threshold (a missing image) resumed with a higher one:
    every shard is reused, and no image is fetched again but the one the storage probe
    reads before the job."""
    names = ["good", "flaky", "throttled", "cut", "missing"]
    argv = [
        "--manifest",
        manifest(tmp_path, server, names),
        "--output_dir",
        str(tmp_path / "out"),
        "--num_shards",
        "2",
    ]
    assert run.main(argv) == 1  # 1 of 5 rows dead-lettered: above the default 1%
    fetched = len(server.requests)
    assert run.main([*argv, "--max_error_fraction", "0.5", "--resume"]) == 0
    # Every shard: 2, or 1 where the 4 URIs (the server's port is in them) all hash to one.
    printed = capsys.readouterr().out
    assert re.search(r"resumed: (\d) of \1 shards? reused", printed), printed
    assert [
        (method, path) for method, path, *_ in server.requests[fetched:] if method == "GET"
    ] == [("GET", "/img/good.jpg")]


@pytest.mark.parametrize(
    "flags, problem",
    [
        (
            ["--manifest", "train=https://example.test/m.csv", "--output_dir", "{tmp}"],
            "--manifest https://example.test/m.csv: a manifest at a URL is not read",
        ),
        (
            ["--image_folder", "http://example.test/photos", "--output_dir", "{tmp}"],
            "--image_folder http://example.test/photos: a web server's folder cannot be listed",
        ),
        (
            ["--manifest", "{tmp}/m.csv", "--output_dir", "https://example.test/out"],
            "--output_dir https://example.test/out: cannot write to a URL",
        ),
    ],
)
def test_what_is_listed_or_written_at_a_url_is_a_usage_error(flags, problem, tmp_path, capsys):
    """Images may be URLs; a manifest, a folder or the output there is refused by name
    (Beam's own error said to pip install apache-beam[gcp])."""
    argv = [flag.format(tmp=tmp_path) for flag in flags]
    assert run.main(argv) == run.EXIT_USAGE
    error = capsys.readouterr().err
    assert error.startswith(f"error: {problem}") and error.count("\n") == 1, error


def test_a_dripping_body_ends_at_the_deadline_of_its_try(server):
    """A byte every 0.4 s never stalls for the 1 s timeout; the try ends 3 timeouts after
    it started, not retried (it held a row for minutes)."""
    server.files["/img/drip.jpg"] = b"x" * 20  # 8 s at this rate
    server.behaviours["/img/drip.jpg"] = Behaviour(drip_s=0.4)
    started = time.monotonic()
    with pytest.raises(DownloadFailed) as failed:
        download(f"{server.url}/img/drip.jpg", DownloadSettings(timeout_s=1.0))
    assert time.monotonic() - started < 4.0
    assert failed.value.reason == "http_timeout"
    assert failed.value.message == (
        f"not all of the body within 3 s (3 x --download_timeout): {server.url}/img/drip.jpg"
    )
    assert len(server.times_asked("/img/drip.jpg")) == 1


def test_a_redirect_is_followed_on_its_own_host_only_and_its_body_is_never_the_image(server):
    good = server.files["/img/good.jpg"]
    server.files["/img/moved.jpg"] = server.files["/img/stalled.jpg"]  # a redirect's body
    server.behaviours["/img/moved.jpg"] = Behaviour(location="/img/good.jpg", status=301)
    assert download(f"{server.url}/img/moved.jpg", DownloadSettings()) == good

    port = server.url.rsplit(":", 1)[1]
    for elsewhere in (
        f"http://localhost:{port}/img/good.jpg",  # the same server, by name
        f"https://{HOST}:{port}/img/good.jpg",
    ):
        server.behaviours["/img/moved.jpg"] = Behaviour(location=elsewhere)
        with pytest.raises(DownloadFailed) as failed:
            download(f"{server.url}/img/moved.jpg", DownloadSettings())
        assert failed.value.reason == "http_302"
        assert failed.value.message == (
            f"HTTP 302 to {elsewhere}: a redirect to another scheme, host or port is not "
            f"followed: {server.url}/img/moved.jpg"
        )

    server.files["/img/loop.jpg"] = good
    server.behaviours["/img/loop.jpg"] = Behaviour(location="/img/loop.jpg")
    with pytest.raises(DownloadFailed) as failed:
        download(f"{server.url}/img/loop.jpg", DownloadSettings())
    assert (failed.value.reason, failed.value.message) == (
        "http_302",
        f"more than {MAX_REDIRECTS} redirects: {server.url}/img/loop.jpg",
    )
    assert len(server.times_asked("/img/loop.jpg")) == MAX_REDIRECTS + 1


def test_credentials_in_image_urls_are_in_no_output_or_message(server, tmp_path, capsys):
    """Userinfo and presigned query strings: the request uses them, the dead letters,
    receipts, report.html, the examples' image/source_id and the console do not show
    them."""
    host = server.url.removeprefix("http://")
    server.files["/img/good.jpg?X-Amz-Credential=AKIAXYZ&size=s"] = server.files["/img/good.jpg"]
    good = f"http://reader:hunter2@{host}/img/good.jpg?X-Amz-Credential=AKIAXYZ&size=s"
    missing = (
        f"{server.url}/img/missing.jpg?X-Goog-Signature=f00d&sig=c0ffee&token=t0k"
        f"&AWSAccessKeyId=AKIAXYZ&Signature=5eCret"
    )
    (tmp_path / "m.csv").write_text(f"train,{good},cat\ntrain,{missing},cat\n")
    output = tmp_path / "out"
    assert (
        run.main(
            [
                "--manifest",
                str(tmp_path / "m.csv"),
                "--output_dir",
                str(output),
                "--max_error_fraction",
                "0.5",
            ]
        )
        == 0
    )
    secrets = ("hunter2", "AKIAXYZ", "f00d", "c0ffee", "t0k", "5eCret")
    printed = "".join(capsys.readouterr())
    written = {path: path.read_bytes() for path in output.rglob("*") if path.is_file()}
    assert output / "report.html" in written
    for secret in secrets:
        assert secret not in printed
        assert [path for path, data in written.items() if secret.encode() in data] == []
    (letter,) = dead_letters(output).values()
    assert letter["uri"] == (
        f"{server.url}/img/missing.jpg?X-Goog-Signature=REDACTED&"
        "sig=REDACTED&token=REDACTED&AWSAccessKeyId=REDACTED&"
        "Signature=REDACTED"
    )
    assert letter["message"] == f"HTTP 404: {letter['uri']}"
    (example,) = read_examples(f"{output}/train-*.tfrecord")
    assert example.features.feature["image/source_id"].bytes_list.value[0].decode() == (
        f"http://REDACTED@{host}/img/good.jpg?X-Amz-Credential=REDACTED&size=s"
    )
    assert server.times_asked("/img/good.jpg?X-Amz-Credential=AKIAXYZ&size=s")  # as written


def test_a_line_of_a_million_letters_is_redacted_in_one_pass(tmp_path):
    """Each letter of a long run began a scan to the run's end (the scheme unbounded):
    quadratic, minutes for a 1 MiB manifest line. In a process of its own, so that a
    regression fails within the bound instead of holding the suite."""
    script = (
        "import sys; from image_tfrecords.core.storage.redaction import redact_urls; "
        "line = 'ab1' * 350_000 + ' https://u:p@host/x?sig=1 ' + 'c' * 70 + '://h/?token=2'; "
        "print(redact_urls(line)[-80:])"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).parents[1],
    )
    assert done.returncode == 0, done.stderr[-2000:]
    # The long scheme is matched from its last MAX_SCHEME_CHARS characters: redacted all
    # the same.
    assert (
        done.stdout.strip()
        == ("https://REDACTED@host/x?sig=REDACTED " + "c" * 70 + "://h/?token=REDACTED")[-80:]
    )


@pytest.mark.parametrize(
    "written, shown",
    [
        ("https://ghp_t0ken@host/a.jpg", "https://REDACTED@host/a.jpg"),
        ("https://u:p@h:8080/a.jpg#p@x", "https://REDACTED@h:8080/a.jpg#p@x"),
        (
            "https://b.s3.amazonaws.com/a.jpg?X-Amz-Algorithm=AWS4-HMAC-SHA256&x-amz-credential=A%2F1"
            "&X-Amz-Date=20260101T000000Z&X-Amz-Expires=60&X-Amz-SignedHeaders=host"
            "&X-Amz-Signature=9f&X-Amz-Security-Token=IQo",
            "https://b.s3.amazonaws.com/a.jpg?X-Amz-Algorithm=AWS4-HMAC-SHA256&x-amz-credential="
            "REDACTED&X-Amz-Date=20260101T000000Z&X-Amz-Expires=60&X-Amz-SignedHeaders=host"
            "&X-Amz-Signature=REDACTED&X-Amz-Security-Token=REDACTED",
        ),
        (
            "https://a.blob.core.windows.net/c/a.jpg?sv=2022&se=2026&sp=r&sig=AbC%3D#top",
            "https://a.blob.core.windows.net/c/a.jpg?sv=2022&se=2026&sp=r&sig=REDACTED#top",
        ),
        (
            "https://cdn.test/a.jpg?size=large&sas_token=x&sig=",
            "https://cdn.test/a.jpg?size=large&sas_token=REDACTED&sig=",
        ),
        ("/data/user:pass@photos/a.jpg?sig=1", "/data/user:pass@photos/a.jpg?sig=1"),  # no URL
    ],
)
def test_redacted_keeps_the_url_but_its_credentials(written, shown):
    assert redacted(written) == shown
    assert redacted(shown) == shown
    assert redact_urls(f"train,{written},cat") == f"train,{shown},cat"
    assert redact_urls(f"HTTP 404: {written}: gone.") == f"HTTP 404: {shown}: gone."
