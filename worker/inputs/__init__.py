"""The input formats: one module per format of manifest or folder (the registry is
sources.py), each parsing a chunk of rows into ManifestRows and dead letters, free of Beam
so that worker processes parse them."""
