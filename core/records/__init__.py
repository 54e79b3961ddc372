"""The typed records every process shares, and the files they are read from and written
as: the run's settings (RunSettings, Workers, the choices), rows and dead letters, what a
shard gave, receipts, example indexes, summary.json and FAILED.json, every output name
(naming.py), the feature keys, splits, extra columns, label maps and the text limits.
Plain data and its checks: no Beam, no TensorFlow, no image."""
