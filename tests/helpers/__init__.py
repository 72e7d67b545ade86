"""Helpers shared by tests: imported from here, never from another test module or a conftest."""
