"""What a worker process does, free of Beam's runner and of TensorFlow: the examples, records
and files of the shards it owns."""
