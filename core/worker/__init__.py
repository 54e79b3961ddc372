"""What a worker process does: the pool that runs whole tasks (pool.py), a chunk of rows
parsed and packed (row_tasks.py), a shard written whole or in parts (shard_writer.py,
shard_parts.py): examples built from the images core/imaging prepares, label ids looked
up, the near-copy search's distances. Its modules import neither Beam nor TensorFlow
(pyproject.toml's `worker` contract); storage goes through core/storage, which imports
Beam's FileSystems only for a path with a scheme."""
