"""A worker pool for a cluster's SDK workers whose Python is imported once, not per job.

What `--environment_type EXTERNAL --environment_config HOST:PORT` names, as Beam's
`worker_pool_main` is: a gRPC service beside each Flink TaskManager (or Spark executor)
that the runner asks to start an SDK worker for a job (StartWorker) and to stop it
(StopWorker). Beam's pool starts each worker as a fresh `python`, which imports Beam,
TensorFlow, tf.Transform and this package again, every job, as no worker outlives its
job: 4.3 s of the sample's run on the tests' cluster (bench/RESULTS.md, issue 58). This
pool imports them once, in a multiprocessing fork server started with the pool, and forks
each worker from it, ready in under a second. The fork server has only imported modules:
it never opened a gRPC channel or ran a TensorFlow op, whose threads a fork would copy
held locks from (a worker opens its own once forked).

Each worker is Beam's own harness (`sdk_worker_main`) with the job's options, endpoints and
id from the runner's provision service, as Beam's containers and image-tfrecords-sdk-worker
(sdk_worker_boot.py) get them: a bucket's keys given as the job's options reach it, and its
log lines go to the runner (the TaskManager's log), not to the pool's.
`image-tfrecords-sdk-worker-pool --service_port PORT` is this module's command.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import tempfile
import threading
import traceback
from collections.abc import Sequence
from concurrent import futures

import grpc
from apache_beam.portability.api import beam_fn_api_pb2, beam_fn_api_pb2_grpc
from apache_beam.runners.worker import sdk_worker_main

from image_tfrecords.pipeline.sdk_worker_boot import provision_info, worker_environment

# What every worker of a conversion imports: Beam's harness, and the pipeline's transforms
# with tf.Transform and TensorFlow behind them (graph.py imports each step's module).
PRELOADED = ("apache_beam.runners.worker.sdk_worker_main", "image_tfrecords.pipeline.graph")
_STOP_SECONDS = 10  # a worker told to stop (SIGTERM) ends at once; then it is killed

_LOGGER = logging.getLogger(__name__)


def run_worker(environment: dict[str, str]) -> None:
    """A forked worker's life: Beam's harness with `environment` (sdk_worker_main reads its
    settings there), until the runner closes its control channel."""
    os.environ.update(environment)
    sdk_worker_main.main(["sdk_worker_main"])


class PreloadedWorkerPool(beam_fn_api_pb2_grpc.BeamFnExternalWorkerPoolServicer):
    """Starts each SDK worker the runner asks for as a fork of `context`'s fork server."""

    def __init__(self, context, semi_persistent_directory: str) -> None:
        self._context = context
        self._semi_persistent_directory = semi_persistent_directory
        self._workers: dict[str, multiprocessing.Process] = {}
        self._lock = threading.Lock()

    def StartWorker(self, request, context):  # noqa: N802 (gRPC's method name)
        try:
            info = provision_info(request.provision_endpoint.url, request.worker_id)
            environment = worker_environment(
                request.worker_id, info, self._semi_persistent_directory
            )
            worker = self._context.Process(
                target=run_worker, args=(environment,), name=f"sdk-worker-{request.worker_id}"
            )
            worker.start()
        except Exception:  # noqa: BLE001 (the runner shows the error, as Beam's pool does)
            return beam_fn_api_pb2.StartWorkerResponse(error=traceback.format_exc())
        with self._lock:
            self._workers[request.worker_id] = worker
            self._forget_ended()
        _LOGGER.info("Started worker %s (process %d)", request.worker_id, worker.pid)
        return beam_fn_api_pb2.StartWorkerResponse()

    def StopWorker(self, request, context):  # noqa: N802 (gRPC's method name)
        with self._lock:
            worker = self._workers.pop(request.worker_id, None)
        if worker is not None:
            _LOGGER.info("Stopping worker %s", request.worker_id)
            _stop(worker)
        return beam_fn_api_pb2.StopWorkerResponse()

    def stop_all(self) -> None:
        with self._lock:
            workers, self._workers = list(self._workers.values()), {}
        for worker in workers:
            _stop(worker)

    def _forget_ended(self) -> None:
        """Drops the workers that ended by themselves (their job closed its channel)."""
        for worker_id, worker in list(self._workers.items()):
            if not worker.is_alive():
                worker.join()
                del self._workers[worker_id]


def _stop(worker: multiprocessing.Process) -> None:
    worker.terminate()
    worker.join(_STOP_SECONDS)
    if worker.is_alive():
        worker.kill()
        worker.join()


def serve(
    port: int, preload: Sequence[str] = PRELOADED
) -> tuple[grpc.Server, int, PreloadedWorkerPool]:
    """The pool listening on `port` (0: any free port; the port is returned), its fork
    server started and importing `preload` in the background."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(preload))
    multiprocessing.forkserver.ensure_running()
    pool = PreloadedWorkerPool(context, tempfile.gettempdir())
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=16),
        options=[("grpc.http2.max_pings_without_data", 0), ("grpc.http2.max_ping_strikes", 0)],
    )
    beam_fn_api_pb2_grpc.add_BeamFnExternalWorkerPoolServicer_to_server(pool, server)
    port = server.add_insecure_port(f"[::]:{port}")
    server.start()
    return server, port, pool


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--service_port", type=int, required=True, help="the port the runner reaches it on"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    server, port, pool = serve(args.service_port)
    # SIGTERM (a pod's end, a service manager's stop) stops the workers too, as Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda signum, frame: server.stop(0))
    _LOGGER.info(
        "Listening for workers on port %d; importing %s once for all of them",
        port,
        ", ".join(PRELOADED),
    )
    try:
        server.wait_for_termination()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop(0)
        pool.stop_all()


if __name__ == "__main__":
    main()
