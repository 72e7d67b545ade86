"""tierlog.cli."""
