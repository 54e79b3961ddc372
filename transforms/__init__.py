"""Beam DoFns and PTransforms of the image-tfrecords pipeline."""
