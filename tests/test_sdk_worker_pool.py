"""image-tfrecords-sdk-worker-pool (pipeline/sdk_worker_pool.py) as the runner talks to it,
without a cluster: tests/test_flink_cluster.py runs it under a real TaskManager (one worker
per job, forked from its fork server, the job's keys from the runner, its lines in the
TaskManager's log)."""

import grpc
from apache_beam.portability.api import beam_fn_api_pb2, beam_fn_api_pb2_grpc, endpoints_pb2
from storage_servers import free_port

from image_tfrecords.pipeline import sdk_worker_pool


def test_a_worker_the_runner_cannot_provision_is_an_error_it_is_told_and_the_pool_serves_on():
    """StartWorker against a provision service that does not answer: an error in the
    answer (Beam's runner logs it and fails the environment), not a dead pool; StopWorker
    of a worker it has not is no error."""
    server, port, _ = sdk_worker_pool.serve(0, preload=())
    try:
        with grpc.insecure_channel(f"localhost:{port}") as channel:
            pool = beam_fn_api_pb2_grpc.BeamFnExternalWorkerPoolStub(channel)
            nobody = endpoints_pb2.ApiServiceDescriptor(url=f"localhost:{free_port()}")
            for worker_id in ("1-1", "1-2"):
                answer = pool.StartWorker(
                    beam_fn_api_pb2.StartWorkerRequest(
                        worker_id=worker_id, provision_endpoint=nobody
                    ),
                    timeout=60,
                )
                assert "StatusCode.UNAVAILABLE" in answer.error, answer
            stopped = pool.StopWorker(beam_fn_api_pb2.StopWorkerRequest(worker_id="1-1"))
            assert stopped.error == ""
    finally:
        server.stop(0)
