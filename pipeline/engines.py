"""Flink and Spark: the job servers `make job-servers` builds, handed to Beam by path.

FlinkRunner and SparkRunner hand the pipeline to a Java job server, which runs it on the
engine; with no job server named, Beam would download one from a Maven URL at run time.
A run here never depends on that: the jar built from job_servers/ (Maven, Java 17) is
given to Beam by path unless the user names another jar or a running job server
(--job_endpoint). The job server's own log, where the engine names the job and its
states, goes to a file of its own that the console names, not to the console.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import logging
import pathlib
import re
import sys
import tempfile
import urllib.request
import zipfile
from collections.abc import Iterator

import psutil
from apache_beam.options.pipeline_options import (
    FlinkRunnerOptions,
    GoogleCloudOptions,
    JobServerOptions,
    PipelineOptions,
    PortableOptions,
    SparkRunnerOptions,
    StandardOptions,
)

from image_tfrecords.core.records import naming
from image_tfrecords.pipeline.options import Option
from image_tfrecords.pipeline.tft_storage import WHAT_WORKS

JOB_SERVERS = pathlib.Path(__file__).resolve().parents[1] / "job_servers"
_STOP_SECONDS = 10  # a job server's JVM takes a second or two to stop once asked
_REST_TIMEOUT_S = 5  # a Flink REST call; the launcher is stopping, it cannot wait long
# What Flink's REST client in the job server logs of a job it submits to a cluster: the
# job's name and id, then the REST address it was submitted to.
_SUBMITTING = re.compile(r"Submitting job '[^']*' \(([0-9a-f]{32})\)")
_SUBMITTED = re.compile(r"Successfully submitted job '[^']*' \(([0-9a-f]{32})\) to '([^']+)'")


@dataclasses.dataclass(frozen=True)
class Engine:
    """One engine Beam runs the job on through a job server."""

    name: str
    jar_option: str  # the PipelineOptions attribute that names the job server's jar
    options_class: type[PipelineOptions]
    built_jar: pathlib.Path  # what `make job-servers` builds
    logger: str  # the logger Beam writes the job server's output to (its class name)
    job_server_argument: str  # an argument Beam starts the job server with
    master_option: str
    local_master: re.Pattern  # a master that runs inside the job server, on this machine
    # Beam's module whose JOB_SERVER_CACHE keeps a started job server for the process's
    # next run with the same options (SparkRunner's); None where Beam keeps none.
    job_server_cache: str | None = None
    # What the engine needs its job server's JVM (Java 17) to open to it, and where Beam
    # keeps the same list on the versions whose runner adds it ("module:ATTRIBUTE"): there
    # Beam's is used; on the others (see java_17_flags) the launcher adds these.
    java_17_flags: tuple[str, ...] = ()
    java_17_flags_in_beam: str | None = None

    def master(self, options: PipelineOptions) -> str:
        return getattr(options.view_as(self.options_class), self.master_option)


ENGINES = {
    "flinkrunner": Engine(
        name="Flink",
        jar_option="flink_job_server_jar",
        options_class=FlinkRunnerOptions,
        built_jar=JOB_SERVERS / "flink" / "target" / "beam-flink-1.19-job-server.jar",
        logger="FlinkJarJobServer",
        job_server_argument="--flink-master",
        master_option="flink_master",
        local_master=re.compile(r"\[(local|auto)\]"),
    ),
    "sparkrunner": Engine(
        name="Spark",
        jar_option="spark_job_server_jar",
        options_class=SparkRunnerOptions,
        built_jar=JOB_SERVERS / "spark" / "target" / "beam-spark-3-job-server.jar",
        logger="SparkJarJobServer",
        job_server_argument="--spark-master-url",
        master_option="spark_master_url",
        local_master=re.compile(r"local(\[.+\])?"),
        job_server_cache="apache_beam.runners.portability.spark_runner",
        # Spark 3 reads JDK internals (its StorageUtils, sun.nio.ch.DirectBuffer). Beam's
        # SparkRunner opens them from apache/beam#39339 on; on Beam 2.69 (setup.py's floor)
        # a run failed on the job server without them: "java.lang.IllegalAccessError: class
        # org.apache.spark.storage.StorageUtils$ ... cannot access class
        # sun.nio.ch.DirectBuffer (in module java.base)" (the compatibility tier, tests/compat/).
        java_17_flags=(
            "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
            "--add-opens=java.base/java.nio=ALL-UNNAMED",
            "--add-opens=java.base/java.util=ALL-UNNAMED",
            "--add-opens=java.base/java.lang.invoke=ALL-UNNAMED",
        ),
        java_17_flags_in_beam=(
            "apache_beam.runners.portability.spark_runner:SPARK_JAR_JOB_SERVER_JVM_ARGS"
        ),
    ),
}


# The job server's class (job_servers/java/) that stages no jars with a job: see
# stage_no_jars_where_the_cluster_has_them.
NO_JARS_TO_STAGE = "imagetfrecords.NoJarsToStage"


class ClusterOptions(PipelineOptions):
    """How a job reaches a Flink or Spark cluster: Beam's options, like the engines' own,
    so summary.json (the conversion's options) does not record them."""

    @classmethod
    def _add_argparse_args(cls, parser) -> None:
        Option(
            "--beam_runner_on_cluster",
            "FlinkRunner on a cluster whose lib/ folder holds Beam's runner (the job "
            "server's jars): the job is submitted without them (152 MB each job "
            "otherwise). See docs/operations/clusters.md.",
            switch=True,
        ).add_to(parser)
        # An option of Beam's Java job server that Beam's Python SDK does not declare (it
        # sends a job server only the options it knows); set below, not by users.
        parser.add_argument("--pipeline_resources_detector_factory_class", help=argparse.SUPPRESS)


class EngineUnusable(ValueError):
    """An engine run that cannot start as asked; reported as a usage error."""


def engine_of(options: PipelineOptions) -> Engine | None:
    """The engine of --runner FlinkRunner / SparkRunner (any case, 'Runner' optional, or
    the class's dotted path)."""
    runner = options.view_as(StandardOptions).runner
    if not isinstance(runner, str):
        return None
    name = runner.rsplit(".", 1)[-1].lower()  # also apache_beam.runners....FlinkRunner
    return ENGINES.get(name if name.endswith("runner") else name + "runner")


def use_built_job_server(options: PipelineOptions) -> None:
    """Names the built job server's jar in `options` where a Flink or Spark run names none.

    Raises EngineUnusable when the jar is not built, or when a cluster's workers would
    write tf.Transform's files to this machine's temp folder.
    """
    engine = engine_of(options)
    if engine is not None:
        _name_the_job_server(engine, options)
        java_17_flags(engine, options)
    stage_no_jars_where_the_cluster_has_them(engine, options)
    if engine is not None and not (
        _runs_on_this_machine(engine, options) or options.view_as(GoogleCloudOptions).temp_location
    ):
        raise EngineUnusable(
            f"--temp_location: on a {engine.name} cluster ({engine.master_option} "
            f"{engine.master(options)}) the workers write tf.Transform's files there; give "
            f"a folder every worker reaches ({WHAT_WORKS})"
        )


def _name_the_job_server(engine: Engine, options: PipelineOptions) -> None:
    engine_options = options.view_as(engine.options_class)
    if not (
        options.view_as(PortableOptions).job_endpoint or getattr(engine_options, engine.jar_option)
    ):
        if not engine.built_jar.exists():
            raise EngineUnusable(
                f"--runner {engine.name}Runner needs Beam's {engine.name} job server: "
                f"`make job-servers` builds it (Maven and Java 17) into {engine.built_jar}; "
                f"or give --{engine.jar_option} JAR, or --job_endpoint HOST:PORT of a "
                "running one"
            )
        setattr(engine_options, engine.jar_option, str(engine.built_jar))


def java_17_flags(engine: Engine, options: PipelineOptions) -> None:
    """Adds the JVM flags the engine needs on Java 17 to --job_server_jvm_properties (for
    the job server Beam starts from a jar), where this Beam's runner does not add them
    itself: whether it does is read from its module (the list it adds), not its version."""
    if not engine.java_17_flags:
        return
    module, _, attribute = (engine.java_17_flags_in_beam or "").partition(":")
    if module and hasattr(importlib.import_module(module), attribute):
        return
    job_server = options.view_as(JobServerOptions)
    given = list(job_server.job_server_jvm_properties or [])
    job_server.job_server_jvm_properties = given + [
        flag for flag in engine.java_17_flags if flag not in given
    ]


def stage_no_jars_where_the_cluster_has_them(
    engine: Engine | None, options: PipelineOptions
) -> None:
    """With --beam_runner_on_cluster, the job server sends the job without its own jars.

    Beam's Flink job server otherwise uploads every jar of its class path with each job
    (163 jars, 152 MB: 13 s of a 69 s sample run on the tests' session cluster), which a
    cluster whose lib/ folder holds Beam's runner does not need. Its class NoJarsToStage
    (in the jar `make job-servers` builds) tells it so.
    """
    cluster = options.view_as(ClusterOptions)
    if not cluster.beam_runner_on_cluster:
        return
    if engine is None or engine.name != "Flink" or _runs_on_this_machine(engine, options):
        raise EngineUnusable(
            "--beam_runner_on_cluster: for --runner FlinkRunner with a cluster's "
            "--flink_master HOST:PORT and its SDK workers there (not LOOPBACK)"
        )
    jar = getattr(options.view_as(engine.options_class), engine.jar_option)
    if jar and not _holds_class(pathlib.Path(jar), NO_JARS_TO_STAGE):
        raise EngineUnusable(
            f"--beam_runner_on_cluster needs the job server `make job-servers` builds "
            f"({engine.built_jar}): --{engine.jar_option} {jar} has no {NO_JARS_TO_STAGE}"
        )
    cluster.pipeline_resources_detector_factory_class = NO_JARS_TO_STAGE


def _holds_class(jar: pathlib.Path, class_name: str) -> bool:
    try:
        with zipfile.ZipFile(jar) as archive:
            return class_name.replace(".", "/") + ".class" in archive.namelist()
    except (OSError, zipfile.BadZipFile):
        return False


def _runs_on_this_machine(engine: Engine, options: PipelineOptions) -> bool:
    """Whether every worker shares this machine's disk: an engine started inside its job
    server, or workers in this process (LOOPBACK)."""
    return (
        _embedded(engine, options)
        or options.view_as(PortableOptions).environment_type == "LOOPBACK"
    )


def runs_inside_the_job_server(engine: Engine, options: PipelineOptions) -> bool:
    """Whether the job ends when its job server does: an engine embedded in it (Flink's
    [local], Spark's local[N]), or Spark on a cluster, whose driver the job server is
    (client mode). A Flink job on a cluster runs on without it."""
    return engine.name == "Spark" or _embedded(engine, options)


def _embedded(engine: Engine, options: PipelineOptions) -> bool:
    """Whether the engine runs inside its job server: Flink's [local], Spark's local[N]."""
    return bool(engine.local_master.fullmatch(engine.master(options).strip()))


@dataclasses.dataclass(frozen=True)
class FlinkJob:
    """A job on a Flink cluster, reached through the cluster's REST API at `url`."""

    job_id: str
    url: str

    def cancel(self) -> None:
        self._call("PATCH", "?mode=cancel")

    def state(self) -> str:
        """RUNNING, CANCELLING, CANCELED, FINISHED, FAILED...: Flink's own names."""
        return self._call("GET")["state"]

    def _call(self, method: str, query: str = "") -> dict:
        request = urllib.request.Request(f"{self.url}/jobs/{self.job_id}{query}", method=method)
        with urllib.request.urlopen(request, timeout=_REST_TIMEOUT_S) as answer:
            body = answer.read()
        return json.loads(body) if body else {}


def submitted_flink_jobs(job_server_output: str, flink_master: str) -> list[FlinkJob]:
    """The jobs a Flink job server submitted to a cluster, as its output (its log) names
    them; their REST address as it says, else --flink_master's."""
    urls = dict(_SUBMITTED.findall(job_server_output))
    return [
        FlinkJob(job_id, urls.get(job_id, _rest_url(flink_master)).rstrip("/"))
        for job_id in dict.fromkeys(_SUBMITTING.findall(job_server_output))
    ]


def flink_jobs_named(name: str, flink_master: str) -> list[FlinkJob]:
    """The jobs named `name` on the cluster at `flink_master`, through its REST API: a job
    server started apart from the launcher (--job_endpoint) submits Beam's job under the
    job's name (Beam's job id is the name, '_' and a UUID). Raises OSError where the
    cluster does not answer."""
    url = _rest_url(flink_master).rstrip("/")
    with urllib.request.urlopen(f"{url}/jobs/overview", timeout=_REST_TIMEOUT_S) as answer:
        jobs = json.loads(answer.read())["jobs"]
    return [FlinkJob(job["jid"], url) for job in jobs if job["name"] == name]


def _rest_url(flink_master: str) -> str:
    return flink_master if "://" in flink_master else f"http://{flink_master}"


@contextlib.contextmanager
def job_server_of_the_run(options: PipelineOptions, run_id: str) -> Iterator[pathlib.Path | None]:
    """Within the block, the output of the job server Beam starts for a Flink or Spark run
    goes to a file the console names; on leaving it, that job server is stopped. Nothing
    for other runners, nor for a job server already running (--job_endpoint).

    Beam logs each line the job server prints at INFO, under the job server's class name;
    Flink's and Spark's own lines (the job's id, its states, the web UI's address) are
    there. The file stays after the run. Beam stops its job server at interpreter exit,
    which the command line skips (cli.exit_now): each run would leave a JVM behind.
    """
    engine = engine_of(options)
    if engine is None or options.view_as(PortableOptions).job_endpoint:
        yield None
        return
    path = pathlib.Path(naming.job_server_log(tempfile.gettempdir(), run_id, engine.name))
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logger = logging.getLogger(engine.logger)
    previous = logger.level, logger.propagate
    logger.setLevel(logging.INFO)
    logger.propagate = False
    logger.addHandler(handler)
    print(
        f"image-tfrecords: running on {engine.name}; the job server's log: {path}",
        file=sys.stderr,
        flush=True,
    )
    try:
        yield path
    finally:
        stop_job_servers(engine)
        logger.removeHandler(handler)
        logger.setLevel(previous[0])
        logger.propagate = previous[1]
        handler.close()


def stop_job_servers(engine: Engine) -> int:
    """Ends the job servers of `engine` this process started (java ... -jar JAR
    --flink-master ... or --spark-master-url ...), the way Beam would: asked, then told.
    Returns how many there were.

    Beam is told first where it keeps its job server for the next run: otherwise a second
    run in this process (a grouped split's, the Python API's next convert()) would send
    its job to the stopped one's port rather than start another."""
    if engine.job_server_cache:
        for kept in importlib.import_module(engine.job_server_cache).JOB_SERVER_CACHE.values():
            kept.stop()  # stops its JVM, and the next run's start() starts a new one
    servers = [
        child
        for child in psutil.Process().children()
        if engine.job_server_argument in _command_line(child)
    ]
    for server in servers:
        server.terminate()
    _, alive = psutil.wait_procs(servers, timeout=_STOP_SECONDS)
    for server in alive:
        server.kill()
    return len(servers)


def _command_line(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:  # it ended meanwhile
        return []
