"""The Beam transforms of the image-tfrecords pipeline: composite PTransforms and DoFns that
hand chunks and shards to the worker processes (core/), gather what they send back, and
publish the run. The work itself, free of Beam, is in core/."""
