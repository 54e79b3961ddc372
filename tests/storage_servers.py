"""Real storage servers for the tests, each on a free port of this machine.

- `GcsEmulator`: the gcp-storage-emulator package's server (the GCS JSON API).
- `S3Server`: moto's server (the S3 REST API, as AWS, OSS, MinIO and Ceph speak it).
- `HdfsCluster`: Hadoop's MiniDFSCluster (a NameNode and a DataNode, with WebHDFS), from
  the jar `make test` builds (tests/hdfs_cluster/).
- `FaultProxy`: stands in front of one of them and forwards every request unchanged,
  except those a test tells it to answer with an HTTP error (some of them, or a share of
  them at a steady rate), the way an overloaded or forbidding server answers, or to cut
  half way through the body. The servers themselves cannot be told to fail.
- `ImageServer`: a web server of image files, each path answering as a test says
  (errors, Retry-After, stalls, cut bodies, a false size).

The servers run as subprocesses, so a test can also stop one mid-run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import http.client
import http.server
import json
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


class _Server:
    """A server subprocess on a free port; `url` is its base URL."""

    def __init__(self, command: list[str], port: int, ready_path: str) -> None:
        self.port = port
        self.url = f"http://{HOST}:{port}"
        # stdin: a pipe that closes when this process ends, however it ends (HdfsCluster
        # stops then; the others never read it).
        self._process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self._wait_until_answering(ready_path)

    def _wait_until_answering(self, path: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"{self._process.args[0]} exited with {self._process.returncode}"
                )
            try:
                with urllib.request.urlopen(self.url + path, timeout=2):
                    return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{self._process.args[0]} did not answer within {timeout:.0f} s")

    def stop(self) -> None:
        self._process.stdin.close()
        self._process.terminate()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


def _venv_script(name: str) -> str:
    """A console script installed beside this interpreter (the venv's bin/)."""
    return os.path.join(os.path.dirname(sys.executable), name)


class GcsEmulator(_Server):
    """The GCS JSON API, in memory."""

    def __init__(self) -> None:
        port = free_port()
        super().__init__(
            [
                _venv_script("gcp-storage-emulator"),
                "start",
                "--host",
                HOST,
                "--port",
                str(port),
                "--in-memory",
                "--quiet",
            ],
            port,
            "/storage/v1/b",
        )

    def create_bucket(self, name: str) -> None:
        request = urllib.request.Request(
            f"{self.url}/storage/v1/b?project=test",
            data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        urllib.request.urlopen(request, timeout=10).close()

    def wipe(self) -> None:
        """Every object gone, the buckets kept. The emulator rewrites its whole metadata
        (every object and soft-deleted object it holds, as JSON) on each write, so a write
        costs ~15 us per object held: objects left by a session's earlier tests (thousands)
        made each write take a second on a loaded machine, and a run's reads waited past
        the client's 120 s retry deadline behind them."""
        urllib.request.urlopen(f"{self.url}/wipe?keep-buckets=true", timeout=60).close()


class S3Server(_Server):
    """The S3 REST API (moto in server mode), in memory."""

    def __init__(self) -> None:
        port = free_port()
        super().__init__(
            [_venv_script("moto_server"), "-H", HOST, "-p", str(port)], port, "/moto-api/"
        )

    def create_bucket(self, name: str) -> None:
        # moto takes an unsigned request; a signed one would need a client library here.
        urllib.request.urlopen(
            urllib.request.Request(f"{self.url}/{name}", method="PUT"), timeout=10
        ).close()


class HdfsCluster(_Server):
    """HDFS on this machine's disk, below `folder`; `port` is the NameNode's HTTP port,
    which Beam's HDFS filesystem (WebHDFS) is given as --hdfs_port."""

    JAR = os.path.join(os.path.dirname(__file__), "hdfs_cluster", "target", "hdfs-minicluster.jar")

    def __init__(self, folder: str) -> None:
        if not os.path.exists(self.JAR):
            raise RuntimeError(f"{self.JAR} is missing: `make test` builds it")
        port = free_port()
        # A small heap and the quick compiler: it starts in ~3 s in ~250 MB.
        super().__init__(
            [
                "java",
                "-Xmx256m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                f"-Djava.io.tmpdir={folder}",
                "-jar",
                self.JAR,
                os.path.join(folder, "cluster"),
                str(port),
            ],
            port,
            "/webhdfs/v1/?op=LISTSTATUS&user.name=test",
        )
        self._wait_until_writable()

    def _wait_until_writable(self, timeout: float = 60.0) -> None:
        """The NameNode answers WebHDFS before its DataNode has registered and before it
        leaves safe mode: a write then fails with "Failed to find datanode" (CI did, on a
        loaded machine). Waits for the NameNode's own count of live DataNodes, out of safe
        mode, as MiniDFSCluster.waitActive does."""
        query = "/jmx?qry=Hadoop:service=NameNode,name=FSNamesystemState"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with urllib.request.urlopen(self.url + query, timeout=5) as answer:
                (state,) = json.load(answer)["beans"]
            if state["NumLiveDataNodes"] >= 1 and state["FSState"] == "Operational":
                return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"HDFS had no live DataNode out of safe mode within {timeout:.0f} s")


def gcs_error(status: int) -> tuple[str, bytes]:
    """An error body as the GCS JSON API sends it."""
    return "application/json", json.dumps(
        {"error": {"code": status, "message": f"injected {status}"}}
    ).encode()


def s3_error(status: int) -> tuple[str, bytes]:
    """An error body as S3 sends it; 503 is S3's SlowDown, its throttling answer."""
    code = {
        403: "AccessDenied",
        404: "NoSuchKey",
        429: "TooManyRequests",
        500: "InternalError",
        503: "SlowDown",
    }.get(status, "InternalError")
    return "application/xml", (
        f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}"
        f"</Code><Message>injected {status}</Message></Error>"
    ).encode()


def object_pattern(name: str) -> str:
    """A fault pattern for requests on the object whose name ends with `name` (on GCS and
    S3), not for listings that mention the name as a prefix in their query."""
    return r"^/[^?]*" + re.escape(name) + r"(\?|$)"


CUT = 0  # Fault.status: forward the request, then cut the answer's body half way


@dataclasses.dataclass
class Fault:
    """Answer `status` to requests whose path (with the query) or body matches `pattern`,
    the first `times` times (None: always), or with `share` to that share of them: the
    k-th request of a path fails by a hash of (`seed`, path, k), so the same requests
    fail on every run, however the run's threads interleave them. A body counts for
    batch requests, which name the objects they act on only there. Status CUT answers
    the real response cut half way through its body and closes the connection, as a
    reset mid-transfer does."""

    pattern: str
    status: int
    times: int | None = None
    share: float | None = None
    seed: int = 0
    hits: int = 0

    def __post_init__(self) -> None:
        self._asked: dict[str, int] = {}

    def applies(self, path: str, body: bytes) -> bool:
        if not (
            re.search(self.pattern, path) is not None
            or re.search(self.pattern, body.decode("latin-1")) is not None
        ):
            return False
        if self.share is not None:
            asked = self._asked[path] = self._asked.get(path, -1) + 1
            draw = hashlib.sha256(f"{self.seed}:{path}:{asked}".encode()).digest()
            return int.from_bytes(draw[:8], "big") / 2**64 < self.share
        return self.times is None or self.hits < self.times


class FaultProxy:
    """An HTTP proxy in front of `upstream_url` that injects the faults it is given.

    `requests` records (method, path, status answered) for every request, in order.
    With `one_at_a_time`, requests wait here for the one before to be answered, for an
    upstream that serves one connection at a time (the GCS emulator): there, a burst
    beyond its listen backlog of 5 waits in TCP's retransmissions (1, 3, 7, 15 ... s), and
    a client gave up after its 60 s read timeout while the emulator was idle.
    """

    _SKIPPED_HEADERS = {"transfer-encoding", "connection", "content-length", "keep-alive"}

    def __init__(
        self,
        upstream_url: str,
        error_body: Callable[[int], tuple[str, bytes]],
        one_at_a_time: bool = False,
    ) -> None:
        self._upstream = upstream_url.removeprefix("http://")
        self._upstream_turn = threading.Lock() if one_at_a_time else contextlib.nullcontext()
        self._error_body = error_body
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self.requests: list[tuple[str, str, int]] = []
        self._server = http.server.ThreadingHTTPServer((HOST, 0), self._handler_class())
        self._server.daemon_threads = True
        self.url = f"http://{HOST}:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def fail(
        self,
        pattern: str,
        status: int,
        times: int | None = None,
        share: float | None = None,
        seed: int = 0,
    ) -> Fault:
        fault = Fault(pattern, status, times, share, seed)
        with self._lock:
            self._faults.append(fault)
        return fault

    def statuses(self, path_pattern: str) -> list[int]:
        """What was answered to the requests whose path matches, in order."""
        with self._lock:
            return [status for _, path, status in self.requests if re.search(path_pattern, path)]

    def reset(self) -> None:
        with self._lock:
            self._faults.clear()
            self.requests.clear()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _injected(self, path: str, body: bytes) -> int | None:
        with self._lock:
            for fault in self._faults:
                if fault.applies(path, body):
                    fault.hits += 1
                    return fault.status
        return None

    def _record(self, method: str, path: str, status: int) -> None:
        with self._lock:
            self.requests.append((method, path, status))

    def _handler_class(self) -> type[http.server.BaseHTTPRequestHandler]:
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet: the test output is the record
                pass

            def _handle(self) -> None:
                body = self._read_body()
                injected = proxy._injected(self.path, body)
                if injected not in (None, CUT):
                    status = injected
                    content_type, data = proxy._error_body(status)
                    headers = [("Content-Type", content_type)]
                else:
                    status, headers, data = self._forward(body)
                cut = injected == CUT and self.command != "HEAD" and len(data) > 1
                proxy._record(self.command, self.path, CUT if cut else status)
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                if self.command != "HEAD" or status >= 400:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if cut:
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                elif self.command != "HEAD":
                    self.wfile.write(data)

            def _read_body(self) -> bytes:
                if "chunked" in self.headers.get("Transfer-Encoding", ""):
                    chunks = []
                    while size := int(self.rfile.readline().split(b";")[0], 16):
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                    self.rfile.readline()
                    return b"".join(chunks)
                return self.rfile.read(int(self.headers.get("Content-Length", 0)))

            def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
                with proxy._upstream_turn:
                    return self._exchange(body)

            def _exchange(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
                upstream = http.client.HTTPConnection(proxy._upstream, timeout=60)
                try:
                    headers = {
                        name: value
                        for name, value in self.headers.items()
                        if name.lower() not in proxy._SKIPPED_HEADERS
                    }
                    if body or self.command in ("POST", "PUT", "PATCH"):
                        headers["Content-Length"] = str(len(body))
                    upstream.request(self.command, self.path, body or None, headers)
                    response = upstream.getresponse()
                    data = response.read()
                    kept = [
                        (name, value)
                        for name, value in response.getheaders()
                        if name.lower() not in proxy._SKIPPED_HEADERS
                    ]
                    if self.command == "HEAD":  # the size of what a GET would return
                        kept += [
                            (name, value)
                            for name, value in response.getheaders()
                            if name.lower() == "content-length"
                        ]
                    return response.status, kept, data
                finally:
                    upstream.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = _handle

        return Handler


@dataclasses.dataclass
class Behaviour:
    """How an ImageServer answers one path, the first `times` GETs (None: every one), then
    with the file: `status` (with Retry-After `retry_after`), or `stall_s` seconds of
    silence before answering, or the body `cut` after half of it (then a reset), or
    `declared` a Content-Length of its own, or the body one byte every `drip_s` seconds,
    or `location` a redirect there (`status`, else 302) whose body is the file."""

    status: int | None = None
    times: int | None = None
    retry_after: str | None = None
    stall_s: float = 0.0
    cut: bool = False
    declared: int | None = None
    drip_s: float = 0.0
    location: str | None = None
    hits: int = 0


class ImageServer:
    """A web server of image files, in this process, on a free port: `files` path ->
    bytes, answered after `latency_s`, each path as its Behaviour says. Records every
    request (method, path, User-Agent, start time) and the most it served at once."""

    def __init__(self, files: dict[str, bytes], latency_s: float = 0.0) -> None:
        self.files = dict(files)
        self.latency_s = latency_s
        self.behaviours: dict[str, Behaviour] = {}
        # A steady rate of faults: this share of all GETs is answered 503 (Retry-After: 0),
        # drawn from a generator seeded with fault_seed.
        self.fault_share = 0.0
        self.fault_seed = 0
        self.failed_by_share = 0
        self._draws: random.Random | None = None
        self.requests: list[tuple[str, str, str, float]] = []
        self.most_at_once = 0
        self._at_once = 0
        self._lock = threading.Lock()
        self._server = http.server.ThreadingHTTPServer((HOST, 0), self._handler_class())
        self._server.daemon_threads = True
        self._server.request_queue_size = 256
        self.url = f"http://{HOST}:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def times_asked(self, path: str) -> list[float]:
        """When each GET of `path` came (a HEAD only asks the size)."""
        with self._lock:
            return [
                started
                for method, asked, _, started in self.requests
                if method == "GET" and asked == path
            ]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _share_fails(self) -> bool:
        """Under the lock: whether this GET is one of fault_share's."""
        if not self.fault_share:
            return False
        if self._draws is None:
            self._draws = random.Random(self.fault_seed)
        failed = self._draws.random() < self.fault_share
        self.failed_by_share += failed
        return failed

    def _handler_class(self) -> type[http.server.BaseHTTPRequestHandler]:
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                with server._lock:
                    server.requests.append(
                        (
                            self.command,
                            self.path,
                            self.headers.get("User-Agent", ""),
                            time.monotonic(),
                        )
                    )
                    server._at_once += 1
                    server.most_at_once = max(server.most_at_once, server._at_once)
                    # A HEAD (a size estimate) is answered plainly, its GET as told.
                    behaviour = (
                        server.behaviours.get(self.path, Behaviour())
                        if self.command == "GET"
                        else Behaviour()
                    )
                    behaviour.hits += 1
                    if self.command == "GET" and server._share_fails():
                        behaviour = Behaviour(status=503, retry_after="0")
                acting = behaviour.times is None or behaviour.hits <= behaviour.times
                try:
                    time.sleep(server.latency_s + (behaviour.stall_s if acting else 0))
                    self._answer(behaviour, acting)
                finally:
                    with server._lock:
                        server._at_once -= 1

            do_HEAD = do_GET

            def _answer(self, behaviour: Behaviour, acting: bool) -> None:
                data = server.files.get(self.path)
                if behaviour.location is not None and acting and data is not None:
                    self.send_response(behaviour.status or 302)
                    self.send_header("Location", behaviour.location)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                failing = behaviour.status is not None and acting
                if data is None or failing:
                    status = behaviour.status if failing else 404
                    self.send_response(status)
                    if behaviour.retry_after is not None:
                        self.send_header("Retry-After", behaviour.retry_after)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "image/jpeg")
                self.send_header("Content-Length", str(behaviour.declared or len(data)))
                self.end_headers()
                if self.command == "HEAD":
                    return
                if behaviour.cut and acting:
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if behaviour.drip_s and acting:
                    self._drip(data, behaviour.drip_s)
                    return
                self.wfile.write(data)

            def _drip(self, data: bytes, every_s: float) -> None:
                try:
                    for byte in data:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(every_s)
                except OSError:  # the client gave up
                    self.close_connection = True

        return Handler
