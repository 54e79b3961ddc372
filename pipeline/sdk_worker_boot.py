"""The boot command of a PROCESS environment: one SDK worker of the job, on a cluster's
machine, from the Python environment this module is installed in.

With `--environment_type PROCESS --environment_config '{"command": "PATH"}'` a Flink
TaskManager (or Spark executor) starts `PATH --id=ID --provision_endpoint=HOST:PORT
--semi_persist_dir=DIR` for each SDK worker it needs. Beam's containers run a Go program
there (`boot`) that asks the runner's provision service for the worker's endpoints and
the job's options, installs the job's staged packages and starts the Python SDK
harness. This does the same for an environment that already holds every pinned package
(this project's venv, the Flex Template's image): no install, and Beam's own harness
(`sdk_worker_main`) replaces this process, with the job's options, so Beam's filesystems
get them as in a container. `image-tfrecords-sdk-worker` is this module's command.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import grpc
from apache_beam.portability.api import beam_provision_api_pb2, beam_provision_api_pb2_grpc
from google.protobuf import json_format, text_format

PROVISION_TIMEOUT_S = 60.0  # the runner's provision service answers at once when it is up


def worker_environment(
    worker_id: str, info: beam_provision_api_pb2.ProvisionInfo, semi_persistent_directory: str
) -> dict[str, str]:
    """The environment Beam's SDK harness (sdk_worker_main) reads its settings from."""
    environment = {
        "WORKER_ID": worker_id,
        "PIPELINE_OPTIONS": json_format.MessageToJson(info.pipeline_options),
        "CONTROL_API_SERVICE_DESCRIPTOR": text_format.MessageToString(info.control_endpoint),
        "LOGGING_API_SERVICE_DESCRIPTOR": text_format.MessageToString(info.logging_endpoint),
        "SEMI_PERSISTENT_DIRECTORY": semi_persistent_directory,
    }
    if info.HasField("status_endpoint"):
        environment["STATUS_API_SERVICE_DESCRIPTOR"] = text_format.MessageToString(
            info.status_endpoint
        )
    if info.runner_capabilities:
        environment["RUNNER_CAPABILITIES"] = " ".join(info.runner_capabilities)
    return environment


def provision_info(endpoint: str, worker_id: str) -> beam_provision_api_pb2.ProvisionInfo:
    """What the runner's provision service says of this worker's job."""
    with grpc.insecure_channel(endpoint) as channel:
        service = beam_provision_api_pb2_grpc.ProvisionServiceStub(channel)
        return service.GetProvisionInfo(
            beam_provision_api_pb2.GetProvisionInfoRequest(),
            metadata=[("worker_id", worker_id)],
            timeout=PROVISION_TIMEOUT_S,
        ).info


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--id", required=True)
    parser.add_argument("--provision_endpoint", required=True)
    parser.add_argument("--semi_persist_dir", default="/tmp")
    args, _ = parser.parse_known_args(argv)  # a runner may pass more (artifact endpoints)
    info = provision_info(args.provision_endpoint, args.id)
    os.execve(
        sys.executable,
        [sys.executable, "-m", "apache_beam.runners.worker.sdk_worker_main"],
        {**os.environ, **worker_environment(args.id, info, args.semi_persist_dir)},
    )


if __name__ == "__main__":
    main()
