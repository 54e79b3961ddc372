"""What a worker process does: the pool that runs whole tasks (pool.py), a chunk of rows
parsed and packed (row_tasks.py, chunks.py), a shard written whole or in parts
(shard_writer.py, shard_parts.py): images read, checked and encoded, examples built, masks
drawn, label ids looked up, copies hashed, thumbnails drawn. Its modules import neither
Beam nor TensorFlow (pyproject.toml's `worker` contract); storage goes through
core/storage, which imports Beam's FileSystems only for a path with a scheme."""
