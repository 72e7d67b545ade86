"""tierlog.metadata."""
