"""The Beam-free work of the pipeline: what a worker process does (read, check and encode
images, build examples, write shards, their indexes and receipts, parse manifest chunks)
and the typed records every process shares (settings, rows, dead letters, summary.json,
names). Nothing here imports Beam's runner or TensorFlow: worker processes import this
package and Pillow, and Beam's FileSystems through storage.py. The Beam transforms that
hand this work out are in transforms/."""
