"""Images, masks and thumbnails: read from storage, decoded, checked and encoded as an
example stores them (images.py, image_files.py), masks drawn at an image's size
(masks.py), objects drawn over a thumbnail (overlays.py). Pillow and numpy; no Beam, no
TensorFlow."""
