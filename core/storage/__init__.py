"""Where files are: local paths opened directly, gs://, s3:// and hdfs:// through Beam's
FileSystems (imported at the first such path) with the job's filesystem options, URLs
downloaded with their faults bounded, and what every output shows of a URL (redaction)."""
