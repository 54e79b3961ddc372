"""Real engine clusters for the tests, each on free ports of this machine.

- `FlinkCluster`: a Flink 1.19 session cluster, a JobManager
  (`StandaloneSessionClusterEntrypoint`) and one TaskManager (`TaskManagerRunner`), each a
  JVM of its own, from the jar `make test` builds (tests/flink_cluster/) and Beam's runner
  (the job server's jar, as a cluster's lib/ would hold it); its REST API is what
  FlinkRunner's `--flink_master` names.
- `WorkerPool`: Beam's SDK worker pool (`worker_pool_main`) with this project's venv, what
  `--environment_type EXTERNAL --environment_config localhost:PORT` names: the cluster
  starts the job's Python workers there, not in the launcher.

Each runs in a process group of its own, with its log in the folder it is given, and
`stop()` ends the group (the pool's workers with it). `FlinkCluster.stop()` first cancels
every job still running, so no job outlives a test.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from storage_servers import HOST, free_port

# How long a cluster or pool may take to answer before the test fails (they answer in
# ~10 s and ~3 s here, alone; CI's machine is shared).
START_TIMEOUT_S = 90.0

# What Flink's distribution sets for every JVM on Java 17 (env.java.opts.all in its
# config.yaml): its serializers reach into these packages.
JAVA_17_OPENS = [f"--add-opens=java.base/{package}=ALL-UNNAMED" for package in (
    "java.lang", "java.net", "java.io", "java.nio", "sun.nio.ch", "java.lang.reflect",
    "java.text", "java.time", "java.util", "java.util.concurrent",
    "java.util.concurrent.atomic", "java.util.concurrent.locks")]

# The TaskManager's memory, every part named: bin/taskmanager.sh computes these from one
# size and hands them over; a TaskManagerRunner started by hand refuses to start without
# them. The job's ~170 tasks need 512 MiB of network buffers (256 MiB fails with
# "Insufficient number of network buffers: required 512, but only 511 available").
TASK_MANAGER_MEMORY = {
    "taskmanager.cpu.cores": "1",
    "taskmanager.memory.framework.heap.size": "128m",
    "taskmanager.memory.task.heap.size": "512m",
    "taskmanager.memory.framework.off-heap.size": "128m",
    "taskmanager.memory.task.off-heap.size": "0m",
    "taskmanager.memory.managed.size": "128m",
    "taskmanager.memory.network.min": "512m",
    "taskmanager.memory.network.max": "512m",
    "taskmanager.memory.jvm-metaspace.size": "256m",
    "taskmanager.memory.jvm-overhead.min": "192m",
    "taskmanager.memory.jvm-overhead.max": "192m",
}
# Beam's runner classes on the cluster's own class path, taken from there before the
# job's jar. Only then does --environment_cache_millis keep an SDK worker from one stage to
# the next: Beam's Flink runner closes a stage's environment at once when its classes came
# from the job's class loader (FlinkExecutableStageContextFactory), so a stock session
# cluster starts a fresh worker (~10 s, TensorFlow's import) for each of the job's ~14
# stages (measured: 14 workers and ~115 s for the sample; 1 worker with these). Without
# the leaked class loader check off, the job failed at once ("ServiceConfigurationError:
# org.apache.beam.sdk.runners.PipelineRunnerRegistrar: Error accessing configuration file").
BEAM_IN_LIB = {"classloader.resolve-order": "parent-first",
               "classloader.check-leaked-classloader": "false"}

# The TaskManager JVM's own limits, as bin/taskmanager.sh derives them from the above:
# heap = framework + task heap (+ room), direct = framework + task off-heap + network.
TASK_MANAGER_JVM = ["-Xmx768m", "-XX:MaxDirectMemorySize=640m",
                    "-XX:MaxMetaspaceSize=256m"]


def _group(command: list[str], log: Path, env: dict | None = None) -> subprocess.Popen:
    """`command` in a process group of its own, stdout and stderr into `log`."""
    with open(log, "wb") as output:
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=output,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)


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


class FlinkCluster:
    """A JobManager and one TaskManager with one slot; `rest_port` is the REST API's port
    (`--flink_master localhost:REST_PORT`), their config and logs are in `folder`.

    `beam_runner_jar` (Beam's Flink job server jar) is on both JVMs' class path, as in a
    cluster whose lib/ folder holds Beam's runner: see BEAM_IN_LIB."""

    JAR = Path(__file__).parent / "flink_cluster" / "target" / "flink-cluster.jar"
    JOB_MANAGER = "org.apache.flink.runtime.entrypoint.StandaloneSessionClusterEntrypoint"
    TASK_MANAGER = "org.apache.flink.runtime.taskexecutor.TaskManagerRunner"

    def __init__(self, folder: Path, beam_runner_jar: Path) -> None:
        for jar, target in ((self.JAR, "test"), (beam_runner_jar, "job-servers")):
            if not jar.exists():
                raise RuntimeError(f"{jar} is missing: `make {target}` builds it")
        self.folder = folder
        self.rest_port = free_port()
        self.url = f"http://{HOST}:{self.rest_port}"
        config = folder / "conf"
        config.mkdir(parents=True)
        (config / "flink-conf.yaml").write_text(self._config(free_port()))
        java = ["java", *JAVA_17_OPENS, f"-Djava.io.tmpdir={folder}",
                "-cp", f"{self.JAR}{os.pathsep}{beam_runner_jar}"]
        self.job_manager_log = folder / "jobmanager.log"
        self.task_manager_log = folder / "taskmanager.log"
        self._processes = [
            _group([*java, "-Xmx512m", self.JOB_MANAGER, "--configDir", str(config)],
                   self.job_manager_log),
            _group([*java, *TASK_MANAGER_JVM, self.TASK_MANAGER, "--configDir", str(config)],
                   self.task_manager_log),
        ]
        try:
            self._wait_for_a_task_manager()
        except BaseException:
            self.stop()
            raise

    def _config(self, rpc_port: int) -> str:
        settings = {
            "jobmanager.rpc.address": HOST, "jobmanager.bind-host": HOST,
            "jobmanager.rpc.port": str(rpc_port), "jobmanager.memory.process.size": "1g",
            "rest.address": HOST, "rest.bind-address": HOST, "rest.port": str(self.rest_port),
            "taskmanager.host": HOST, "taskmanager.bind-host": HOST,
            "taskmanager.rpc.port": "0", "blob.server.port": "0",
            "taskmanager.numberOfTaskSlots": "1", "parallelism.default": "1",
            **TASK_MANAGER_MEMORY, **BEAM_IN_LIB,
        }
        return "".join(f"{key}: {value}\n" for key, value in settings.items())

    def rest(self, path: str, method: str = "GET") -> dict:
        """The REST API's JSON answer to `method path`."""
        request = urllib.request.Request(self.url + path, method=method)
        with urllib.request.urlopen(request, timeout=10) as answer:
            body = answer.read()
        return json.loads(body) if body else {}

    def jobs(self) -> list[dict]:
        """/jobs/overview's jobs: each with its `jid`, `name` and `state`."""
        return self.rest("/jobs/overview")["jobs"]

    def _wait_for_a_task_manager(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            for process, log in zip(self._processes, (self.job_manager_log,
                                                      self.task_manager_log)):
                if process.poll() is not None:
                    raise RuntimeError(f"{log.stem} exited with {process.returncode}:\n"
                                       f"{_log_tail(log)}")
            try:
                if self.rest("/overview")["taskmanagers"] >= 1:
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"no TaskManager registered within {START_TIMEOUT_S:.0f} s:\n"
                           f"{_log_tail(self.task_manager_log)}")

    def cancel_running_jobs(self) -> None:
        for job in self.jobs():
            if job["state"] not in ("FINISHED", "FAILED", "CANCELED"):
                self.rest(f"/jobs/{job['jid']}?mode=cancel", method="PATCH")

    def stop(self) -> None:
        try:
            self.cancel_running_jobs()
        except OSError:
            pass  # the JobManager is not answering (or never did): nothing to cancel there
        for process in reversed(self._processes):
            _stop_group(process)


class WorkerPool:
    """Beam's SDK worker pool on `port`, with this interpreter's venv first on PATH: the
    pool starts each worker as the `python` on PATH. The workers import this worktree's
    packages (PYTHONPATH), as the launcher does. `workers_python`, where given, is the
    `python` the workers start with instead (one without Beam: workers that never start)."""

    def __init__(self, folder: Path, workers_python: str | None = None) -> None:
        self.port = free_port()
        self.log = folder / "worker_pool.log"
        first_on_path = os.path.dirname(sys.executable)
        if workers_python:
            first_on_path = str(folder / "worker_pool_bin")
            os.mkdir(first_on_path)
            os.symlink(workers_python, os.path.join(first_on_path, "python"))
        env = {**os.environ,
               "PATH": f"{first_on_path}{os.pathsep}{os.environ.get('PATH', '')}",
               "PYTHONPATH": str(Path(__file__).parents[1]), "TMPDIR": str(folder)}
        self._process = _group([sys.executable, "-m",
                                "apache_beam.runners.worker.worker_pool_main",
                                "--service_port", str(self.port)], self.log, env)
        try:
            self._wait_until_listening()
        except BaseException:
            self.stop()
            raise

    def _wait_until_listening(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"the worker pool exited with {self._process.returncode}:"
                                   f"\n{_log_tail(self.log)}")
            try:
                socket.create_connection((HOST, self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"the worker pool did not listen within {START_TIMEOUT_S:.0f} s")

    def stop(self) -> None:
        _stop_group(self._process)
