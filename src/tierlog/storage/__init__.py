"""tierlog.storage."""
