"""Code of the launcher's process alone: what it prints (console.py) and publishing an
output (publishing.py, which imports Beam's FileSystems). No worker process imports it;
how a run stops on SIGINT and SIGTERM is core/worker/interrupts.py, which the worker
pool shares with the launcher."""
