"""The work that is not a Beam transform, in folders by role:

- records/: the typed records every process shares (settings, rows, dead letters,
  receipts, example indexes, summary.json, every output name);
- worker/: what a worker process does (parse chunks of rows, read and encode images,
  write shards); it imports neither Beam nor TensorFlow;
- inputs/: one module per input format, behind InputFormat's registry;
- file_formats/: one module per shard file format, behind ShardFormat's registry;
- storage/: local files, buckets through Beam's FileSystems, URLs;
- report/: report.html and what changed between two outputs;
- launcher/: the launcher's console, signals and publishing.

The Beam transforms that hand this work out are in transforms/."""
