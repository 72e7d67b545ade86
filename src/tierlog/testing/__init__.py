"""Fakes shipped for tests: a manual clock and a scheduler driven by it. Never imported by src."""

from tierlog.testing.clock import ManualClock, ManualScheduler

__all__ = ["ManualClock", "ManualScheduler"]
