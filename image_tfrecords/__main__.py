"""`python -m image_tfrecords --manifest data.csv --output_dir out/ [Beam options]`: a
conversion, as `image-tfrecords convert`."""

from image_tfrecords.core import console
from image_tfrecords.pipeline.cli import convert_main, exit_now

console.escape_what_is_printed()  # as `image-tfrecords`: labels and paths are strangers'
exit_now(convert_main())
