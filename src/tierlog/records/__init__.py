"""tierlog.records."""
