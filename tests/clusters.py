"""Real engine clusters for the tests, each on free ports of this machine.

- `FlinkCluster`: a Flink 1.19 session cluster, a JobManager
  (`StandaloneSessionClusterEntrypoint`) and one TaskManager (`TaskManagerRunner`), each a
  JVM of its own, from the jar `make test` builds (tests/flink_cluster/) and Beam's runner
  (the job server's jar, as a cluster's lib/ would hold it); its REST API is what
  FlinkRunner's `--flink_master` names.
- `SparkCluster`: a Spark 3.5.0 standalone cluster, a Master and one Worker, each a JVM of
  its own, from the jar `make test` builds (tests/spark_cluster/); the Worker starts the
  application's executors. Its master URL is what SparkRunner's `--spark_master_url`
  names; the Master's web UI (/json/) shows its workers and applications.
- `WorkerPool`: Beam's SDK worker pool (`worker_pool_main`) with this project's venv, what
  `--environment_type EXTERNAL --environment_config localhost:PORT` names: the cluster
  starts the job's Python workers there, not in the launcher.

Each runs in a process group of its own, with its log in the folder it is given, and
`stop()` ends the group (the pool's workers, the Worker's executors with it). A cluster's
`stop()` first cancels every job (Flink) or kills every application (Spark) still running,
so none outlives a test.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

from storage_servers import HOST, free_port

from image_tfrecords.pipeline import engines

ROOT = Path(__file__).parents[1]
# The page whose commands the tests run (FlinkPage).
PAGE = ROOT / "docs" / "operations" / "clusters.md"

# How long a cluster or pool may take to answer before the test fails (they answer in
# ~10 s and ~3 s here, alone; CI's machine is shared).
START_TIMEOUT_S = 90.0

# What Flink's distribution sets for every JVM on Java 17 (env.java.opts.all in its
# config.yaml): its serializers reach into these packages.
JAVA_17_OPENS = [
    f"--add-opens=java.base/{package}=ALL-UNNAMED"
    for package in (
        "java.lang",
        "java.net",
        "java.io",
        "java.nio",
        "sun.nio.ch",
        "java.lang.reflect",
        "java.text",
        "java.time",
        "java.util",
        "java.util.concurrent",
        "java.util.concurrent.atomic",
        "java.util.concurrent.locks",
    )
]

# The TaskManager's memory, every part named: bin/taskmanager.sh computes these from one
# size and hands them over; a TaskManagerRunner started by hand refuses to start without
# them. Its network buffers are the page's (FlinkPage.settings).
TASK_MANAGER_MEMORY = {
    "taskmanager.cpu.cores": "1",
    "taskmanager.memory.framework.heap.size": "128m",
    "taskmanager.memory.task.heap.size": "512m",
    "taskmanager.memory.framework.off-heap.size": "128m",
    "taskmanager.memory.task.off-heap.size": "0m",
    "taskmanager.memory.managed.size": "128m",
    "taskmanager.memory.jvm-metaspace.size": "256m",
    "taskmanager.memory.jvm-overhead.min": "192m",
    "taskmanager.memory.jvm-overhead.max": "192m",
}

# The TaskManager JVM's own limits, as bin/taskmanager.sh derives them from the above:
# heap = framework + task heap (+ room), direct = framework + task off-heap + network.
TASK_MANAGER_JVM = ["-Xmx768m", "-XX:MaxDirectMemorySize=640m", "-XX:MaxMetaspaceSize=256m"]

# What Spark's launcher gives every JVM it starts on Java 17 (spark-class, through
# org.apache.spark.launcher.JavaModuleOptions); SparkContext gives its executors the same.
SPARK_JAVA_17_OPTIONS = [
    "-XX:+IgnoreUnrecognizedVMOptions",
    *(
        f"--add-opens=java.base/{package}=ALL-UNNAMED"
        for package in (
            "java.lang",
            "java.lang.invoke",
            "java.lang.reflect",
            "java.io",
            "java.net",
            "java.nio",
            "java.util",
            "java.util.concurrent",
            "java.util.concurrent.atomic",
            "jdk.internal.ref",
            "sun.nio.ch",
            "sun.nio.cs",
            "sun.security.action",
            "sun.util.calendar",
        )
    ),
    "-Djdk.reflect.useDirectMethodHandle=false",
]
# The Worker's share for executors: one executor of the application (2 cores, as the
# embedded runs' local[2]; Spark's default 1 GiB heap, with room to spare).
SPARK_WORKER_RESOURCES = ["--cores", "2", "--memory", "2g"]


def _group(
    command: list[str], log: Path, env: dict | None = None, cwd: Path | None = None
) -> subprocess.Popen:
    """`command` in a process group of its own, stdout and stderr into `log`."""
    with open(log, "wb") as output:
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )


def _stop_group(process: subprocess.Popen) -> None:
    """Ends `process` and everything it started: SIGTERM, then SIGKILL after 10 s."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    else:  # the leader is gone; its children may not be
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _log_tail(log: Path, characters: int = 3000) -> str:
    return log.read_text(errors="replace")[-characters:] if log.exists() else ""


def _require_built(jars: dict[Path, str]) -> None:
    """Each jar of `jars` is there, or the make target (its value) that builds it is named."""
    for jar, target in jars.items():
        if not jar.exists():
            raise RuntimeError(f"{jar} is missing: `make {target}` builds it")


def _request(url: str, method: str = "GET") -> bytes:
    """The body of the answer to `method url`."""
    with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=10) as answer:
        return answer.read()


def _json(url: str, method: str = "GET") -> dict:
    """The JSON answer to `method url` (an empty answer is {})."""
    body = _request(url, method)
    return json.loads(body) if body else {}


def _wait_until(
    ready: Callable[[], bool], processes: list[tuple[subprocess.Popen, Path]], waiting_for: str
) -> None:
    """Returns once `ready()` is true; raises, with the log's tail, when one of `processes`
    (each with its log) exits first or START_TIMEOUT_S passes. `ready` raising OSError
    (a port not listening yet) is not ready."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        for process, log in processes:
            if process.poll() is not None:
                raise RuntimeError(
                    f"{log.stem} exited with {process.returncode}:\n{_log_tail(log)}"
                )
        try:
            if ready():
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(
        f"{waiting_for} within {START_TIMEOUT_S:.0f} s:\n{_log_tail(processes[-1][1])}"
    )


class _Cluster:
    """JVMs, each in a process group of its own with its log; `stop()` ends any job left
    on the cluster (`cancel_running_jobs`), then every JVM, the last started first."""

    def __init__(self) -> None:
        self._jvms: list[tuple[subprocess.Popen, Path]] = []

    def _start(self, command: list[str], log: Path, env: dict | None = None) -> None:
        self._jvms.append((_group(command, log, env), log))

    def _wait_for(self, ready: Callable[[], bool], waiting_for: str) -> None:
        """`_wait_until` on this cluster's JVMs; on failure every JVM is stopped."""
        try:
            _wait_until(ready, self._jvms, waiting_for)
        except BaseException:
            self.stop()
            raise

    def cancel_running_jobs(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        try:
            self.cancel_running_jobs()
        except OSError:
            pass  # the cluster is not answering (or never did): nothing to cancel there
        for process, _ in reversed(self._jvms):
            _stop_group(process)


class FlinkCluster(_Cluster):
    """A Flink 1.19 installation laid out as docs/operations/clusters.md says, and a session
    cluster of it: a JobManager and one TaskManager with one slot. `rest_port` is the REST
    API's port (`--flink_master localhost:REST_PORT`); the installation (FLINK_HOME:
    `home`, its conf/ and log/) and the JVMs' working files are in `folder`.

    The installation is Flink's lib/ as `make test` builds it (tests/flink_cluster/), Beam's
    runner added by the page's command (`page`: job_servers/flink/copy-to-flink-lib.sh,
    into lib/beam/), the page's settings in conf/config.yaml and Flink's own
    conf/log4j.properties. Each JVM is started as Flink's bin/flink-daemon.sh starts it:
    the class path bin/config.sh makes of lib/ (`flink_class_path`), log4j writing to the
    file `-Dlog.file` names (`job_manager_log`, `task_manager_log`: what the web UI shows),
    stdout and stderr to the .out file beside it."""

    DISTRIBUTION = Path(__file__).parent / "flink_cluster" / "target" / "flink"
    LOG4J_PROPERTIES = Path(__file__).parent / "flink_cluster" / "conf" / "log4j.properties"
    JOB_MANAGER = "org.apache.flink.runtime.entrypoint.StandaloneSessionClusterEntrypoint"
    TASK_MANAGER = "org.apache.flink.runtime.taskexecutor.TaskManagerRunner"

    def __init__(self, folder: Path, page: FlinkPage) -> None:
        super().__init__()
        self._page = page
        _require_built(
            {
                self.DISTRIBUTION / "lib" / "flink-dist-1.19.0.jar": "test",
                engines.ENGINES["flinkrunner"].built_jar: "job-servers",
            }
        )
        self.folder = folder
        self.home = folder / "flink"
        self.rest_port = free_port()
        self.url = f"http://{HOST}:{self.rest_port}"
        self._install()
        self.job_manager_log = self._daemon(
            "standalonesession", ["-Xmx512m"], self.JOB_MANAGER, "--executionMode", "cluster"
        )
        self.task_manager_log = self._daemon("taskexecutor", TASK_MANAGER_JVM, self.TASK_MANAGER)
        # A slot, not just a TaskManager: it registers before it offers its slot.
        self._wait_for(
            lambda: self.rest("/overview")["slots-total"] >= 1, "no TaskManager slot registered"
        )

    def _install(self) -> None:
        """FLINK_HOME: Flink's lib/ (links to the built jars), Beam's runner copied in by
        the page's command, conf/."""
        lib = self.home / "lib"
        lib.mkdir(parents=True)
        for jar in (self.DISTRIBUTION / "lib").glob("*.jar"):
            (lib / jar.name).symlink_to(jar)
        # where flink-dist's manifest names Flink's modules (../flink-dist-lib/ of lib/)
        (self.home / "flink-dist-lib").symlink_to(self.DISTRIBUTION / "flink-dist-lib")
        subprocess.run(
            [str(self.home) if part == "$FLINK_HOME" else part for part in self._page.copy_runner],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        conf = self.home / "conf"
        conf.mkdir()
        (conf / "config.yaml").write_text(self._config(free_port()))
        shutil.copy(self.LOG4J_PROPERTIES, conf)
        (self.home / "log").mkdir()

    def _daemon(self, daemon: str, memory: list[str], main_class: str, *arguments: str) -> Path:
        """Starts `main_class` as bin/flink-daemon.sh starts DAEMON; its log4j log."""
        conf = self.home / "conf"
        prefix = self.home / "log" / f"flink-{daemon}-0"
        log = prefix.with_suffix(".log")
        self._start(
            [
                "java",
                *JAVA_17_OPENS,
                *memory,
                f"-Djava.io.tmpdir={self.folder}",
                f"-Dlog.file={log}",
                f"-Dlog4j.configuration=file:{conf / 'log4j.properties'}",
                f"-Dlog4j.configurationFile=file:{conf / 'log4j.properties'}",
                "-classpath",
                flink_class_path(self.home / "lib"),
                main_class,
                "--configDir",
                str(conf),
                *arguments,
            ],
            prefix.with_suffix(".out"),
        )
        return log

    def _config(self, rpc_port: int) -> str:
        settings = {
            "jobmanager.rpc.address": HOST,
            "jobmanager.bind-host": HOST,
            "jobmanager.rpc.port": str(rpc_port),
            "jobmanager.memory.process.size": "1g",
            "rest.address": HOST,
            "rest.bind-address": HOST,
            "rest.port": str(self.rest_port),
            "taskmanager.host": HOST,
            "taskmanager.bind-host": HOST,
            "taskmanager.rpc.port": "0",
            "blob.server.port": "0",
            "taskmanager.numberOfTaskSlots": "1",
            "parallelism.default": "1",
            **TASK_MANAGER_MEMORY,
            **self._page.settings,
        }
        return "".join(f"{key}: {value}\n" for key, value in settings.items())

    def rest(self, path: str, method: str = "GET") -> dict:
        """The REST API's JSON answer to `method path`."""
        return _json(self.url + path, method)

    def jars_sent_with(self, job_id: str) -> list[Path]:
        """The jars the TaskManager fetched for job `job_id` from the JobManager's blobs."""
        return [
            path
            for path in self.folder.glob(f"tm_*/blobStorage/job_{job_id}/*")
            if path.read_bytes()[:2] == b"PK"
        ]

    def jobs(self) -> list[dict]:
        """/jobs/overview's jobs, oldest first: each with its `jid`, `name` and `state`."""
        return sorted(self.rest("/jobs/overview")["jobs"], key=lambda job: job["start-time"])

    def cancel_running_jobs(self) -> None:
        for job in self.jobs():
            if job["state"] not in ("FINISHED", "FAILED", "CANCELED"):
                self.rest(f"/jobs/{job['jid']}?mode=cancel", method="PATCH")


def flink_class_path(lib: Path) -> str:
    """The class path Flink's bin/config.sh (constructFlinkClassPath) gives its JVMs: every
    jar under lib/, sub-folders included, in sorted order, the flink-dist jar last."""
    jars = sorted(str(jar) for jar in lib.rglob("*.jar"))
    dist = [jar for jar in jars if re.search(r"/flink-dist[^/]*\.jar$", jar)]
    return os.pathsep.join([jar for jar in jars if jar not in dist] + dist)


class SparkCluster(_Cluster):
    """A Master and one Worker (SPARK_WORKER_RESOURCES), all on HOST: `master_url` is what
    `--spark_master_url` names, `url` the Master's web UI, whose /json/ is the cluster's
    state (`state()`); their logs and the Worker's work folder (each executor's log, the
    jars the application shipped) are in `folder`.

    `folder`/spark-home is the cluster's SPARK_HOME: its jars/ folder (the jar's target/lib)
    is what the Worker puts on each executor's class path, as a Spark distribution's is.
    Beam's runner is not there: the application ships it (tests/test_spark_cluster.py)."""

    JAR = Path(__file__).parent / "spark_cluster" / "target" / "spark-cluster.jar"
    MASTER = "org.apache.spark.deploy.master.Master"
    WORKER = "org.apache.spark.deploy.worker.Worker"

    def __init__(self, folder: Path) -> None:
        super().__init__()
        _require_built({self.JAR: "test"})
        home = folder / "spark-home"
        home.mkdir(parents=True)
        (home / "jars").symlink_to(self.JAR.parent / "lib", target_is_directory=True)
        self.work_dir = folder / "work"
        master_port, ui_port = free_port(), free_port()
        self.master_url = f"spark://{HOST}:{master_port}"
        self.url = f"http://{HOST}:{ui_port}"
        # SPARK_LOCAL_IP: every server binds HOST (the web UIs bind 0.0.0.0 without it);
        # SPARK_LOCAL_DIRS: the executors' scratch space, not /tmp.
        env = {
            **os.environ,
            "SPARK_HOME": str(home),
            "SPARK_SCALA_VERSION": "2.12",
            "SPARK_LOCAL_IP": HOST,
            "SPARK_LOCAL_DIRS": str(folder),
        }
        java = [
            "java",
            *SPARK_JAVA_17_OPTIONS,
            "-Xmx512m",
            f"-Djava.io.tmpdir={folder}",
            "-cp",
            str(self.JAR),
        ]
        self.master_log = folder / "master.log"
        self.worker_log = folder / "worker.log"
        self._start(
            [
                *java,
                self.MASTER,
                "--host",
                HOST,
                "--port",
                str(master_port),
                "--webui-port",
                str(ui_port),
            ],
            self.master_log,
            env,
        )
        self._start(
            [
                *java,
                self.WORKER,
                "--host",
                HOST,
                "--webui-port",
                str(free_port()),
                *SPARK_WORKER_RESOURCES,
                "--work-dir",
                str(self.work_dir),
                self.master_url,
            ],
            self.worker_log,
            env,
        )
        self._wait_for(lambda: self.state()["aliveworkers"] >= 1, "no Worker registered")

    def state(self) -> dict:
        """The Master's /json/: its workers, `activeapps` and `completedapps` (each with its
        `id`, `name`, `state`, `starttime` and `duration` in ms)."""
        return _json(self.url + "/json/")

    def applications(self) -> list[dict]:
        """Every application the Master knows, running or ended, the oldest first."""
        state = self.state()
        return sorted(
            state["activeapps"] + state["completedapps"],
            key=lambda application: application["starttime"],
        )

    def cancel_running_jobs(self) -> None:
        """Kills each application not ended, as the web UI's kill link does (its driver is
        told, its executors stopped; the answer is the UI's page)."""
        for application in self.state()["activeapps"]:
            query = urllib.parse.urlencode({"id": application["id"], "terminate": "true"})
            _request(f"{self.url}/app/kill/?{query}", method="POST")

    def stop(self) -> None:
        """Then the Worker's executors' copies of the jars each application shipped (260
        MB of Beam's job server's class path per run) are removed; their logs stay."""
        super().stop()
        for jar in self.work_dir.glob("app-*/*/*.jar"):
            jar.unlink()


# Beam's own worker pool, as its docs start it (the port is WorkerPool's).
BEAM_POOL = [
    sys.executable,
    "-m",
    "apache_beam.runners.worker.worker_pool_main",
    "--service_port",
    "50000",
]


class _Service:
    """A process of its own group that serves on HOST:`port`, its output in `log`."""

    port: int
    log: Path

    def _serve(self, process: subprocess.Popen, name: str) -> None:
        """Keeps `process`; returns once it listens (else stops it and raises)."""
        self._process = process
        try:
            _wait_until(self._listening, [(process, self.log)], f"{name} did not listen")
        except BaseException:
            self.stop()
            raise

    def _listening(self) -> bool:
        socket.create_connection((HOST, self.port), timeout=1).close()
        return True

    def stop(self) -> None:
        _stop_group(self._process)


class WorkerPool(_Service):
    """An SDK worker pool on `port`, with this interpreter's venv first on PATH.

    `command` is the pool's command line, its `--service_port` a free port's instead
    (FlinkPage.pool: the page's, image-tfrecords-sdk-worker-pool; else Beam's
    worker_pool_main, which starts each worker as the `python` on PATH). `environment` is
    added to its own (AWS_* variables of this process never reach it); `workers_python`,
    where given, is the `python` Beam's pool starts workers with instead (one without
    Beam: workers that never start)."""

    def __init__(
        self,
        folder: Path,
        command: list[str] | None = None,
        environment: dict[str, str] | None = None,
        workers_python: str | None = None,
    ) -> None:
        self.port = free_port()
        self.log = folder / "worker_pool.log"
        first_on_path = os.path.dirname(sys.executable)
        if workers_python:
            first_on_path = str(folder / "worker_pool_bin")
            os.mkdir(first_on_path)
            os.symlink(workers_python, os.path.join(first_on_path, "python"))
        env = {
            **{name: value for name, value in os.environ.items() if not name.startswith("AWS_")},
            "PATH": f"{first_on_path}{os.pathsep}{os.environ.get('PATH', '')}",
            "TMPDIR": str(folder),
            **(environment or {}),
        }
        command = list(command or BEAM_POOL)
        command[command.index("--service_port") + 1] = str(self.port)
        self._serve(_group(command, self.log, env), "the worker pool")


class JobServer(_Service):
    """A Flink job server started once (`command`, the page's, with its ports free ones of
    this machine's, its host this one and the cluster's REST address `flink_master`),
    taking every job: `endpoint` is what `--job_endpoint` names."""

    def __init__(self, folder: Path, command: list[str], flink_master: str) -> None:
        self.port = free_port()
        ports = {"--job-port": self.port, "--artifact-port": free_port(), "--expansion-port": 0}
        arguments = list(command)
        for flag, port in ports.items():
            arguments[arguments.index(flag) + 1] = str(port)
        arguments[arguments.index("--job-host") + 1] = HOST
        arguments[arguments.index("--flink-master") + 1] = flink_master
        self.endpoint = f"{HOST}:{self.port}"
        self.log = folder / "job_server.log"
        # The jar names the jars of the lib/ beside it: run where `make job-servers` built it.
        self._serve(
            _group(arguments, self.log, cwd=engines.ENGINES["flinkrunner"].built_jar.parent),
            "the job server",
        )


@dataclasses.dataclass(frozen=True)
class FlinkPage:
    """The commands and settings docs/operations/clusters.md gives for a Flink session
    cluster, in its order: each command split as a shell would (continuation lines joined)."""

    copy_runner: list[str]  # Beam's runner into Flink's lib/ ($FLINK_HOME)
    settings: dict[str, str]  # conf/config.yaml
    pool: list[str]  # beside each TaskManager
    job_server: list[str]  # once
    launcher: list[str]  # each conversion

    def launcher_flags(
        self, cluster: FlinkCluster, job_server: JobServer, pool: WorkerPool, temp: Path
    ) -> list[str]:
        """The launcher's options for this machine's `cluster`, `job_server` and `pool`,
        tf.Transform's folder in `temp`; the page's storage options (--manifest,
        --output_dir, --s3_endpoint_url) are left for the caller's."""
        replacements = {
            "jobmanager:8081": f"localhost:{cluster.rest_port}",
            "jobserver:8099": job_server.endpoint,
            "localhost:50000": f"localhost:{pool.port}",
            "/shared/tmp": str(temp / "tft"),
        }
        leave_out = ("--manifest", "--output_dir", "--s3_endpoint_url")
        flags = self.launcher[self.launcher.index("image_tfrecords") + 1 :]
        missing = set(replacements) - set(flags)
        assert not missing, f"the page's launcher command has no {missing}: {flags}"
        kept = []
        for flag in flags:
            if kept and kept[-1] in leave_out:
                kept.pop()
                continue
            kept.append(replacements.get(flag, flag))
        return kept


def flink_page() -> FlinkPage:
    """The fenced blocks under the page's "A Flink session cluster", as FlinkPage."""
    text = PAGE.read_text()
    section = text[text.index("## A Flink session cluster") :]
    section = section[: section.index("\n## ", 1)]
    blocks = re.findall(r"^```(sh|yaml)\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    commands = [shlex.split(body.replace("\\\n", " ")) for kind, body in blocks if kind == "sh"]
    (settings,) = [
        dict(line.split(": ", 1) for line in body.splitlines())
        for kind, body in blocks
        if kind == "yaml"
    ]
    copy_runner, pool, job_server, launcher = commands
    return FlinkPage(copy_runner, settings, pool, job_server, launcher)


@contextlib.contextmanager
def beside_a_pool(
    pool: WorkerPool, start_cluster: Callable[[], _Cluster]
) -> Iterator[tuple[_Cluster, WorkerPool]]:
    """The cluster `start_cluster` starts, and `pool` beside it; at the end (or when the
    cluster does not start) any job left is ended and every JVM and worker stopped."""
    try:
        cluster = start_cluster()
    except BaseException:
        pool.stop()
        raise
    try:
        yield cluster, pool
    finally:
        cluster.stop()
        pool.stop()
