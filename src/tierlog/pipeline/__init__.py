"""tierlog.pipeline."""
