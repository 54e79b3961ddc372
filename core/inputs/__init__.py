"""The input formats: one module per format of manifest or folder, each an InputFormat
(input_format.py) registered in sources.py, parsing a chunk of rows into ManifestRows and
dead letters, free of Beam so that worker processes parse them."""
