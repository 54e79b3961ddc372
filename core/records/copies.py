"""What counts as a copy of an image.

Read by the options as well as by duplicates.py and near_duplicates.py, and so kept free
of TensorFlow: the command line checks its options before TensorFlow starts (and prints
its start-up lines, which core/launcher/console.py keeps out of sight).
"""

HASH_BITS = 64  # of images.perceptual_hash
# Chosen on planted copies among distinct photos (bench/near_duplicate_threshold.py;
# docs/output/copies.md has the figures); beyond MAX_NEAR_DISTANCE distinct photos pair up
# by the dozen.
DEFAULT_NEAR_DISTANCE = 10
MAX_NEAR_DISTANCE = 20
