"""tierlog._util."""
