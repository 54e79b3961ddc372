"""The image-tfrecords pipeline: options, the graph and the entry points."""
