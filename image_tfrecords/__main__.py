"""`python -m image_tfrecords --manifest data.csv --output_dir out/ [Beam options]`: a
conversion, as `image-tfrecords convert`."""

from image_tfrecords.pipeline.cli import convert_main, exit_now

exit_now(convert_main())
