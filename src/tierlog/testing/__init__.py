"""Fakes shipped for tests: a manual clock and a scheduler driven by it, an in-memory transport
for the connection layer, and an in-memory remote log metadata store. Never imported by src."""

from tierlog.testing.clock import ManualClock, ManualScheduler
from tierlog.testing.remote_metadata import InMemoryRemoteLogMetadataManager
from tierlog.testing.transport import FakeTransport

__all__ = ["FakeTransport", "InMemoryRemoteLogMetadataManager", "ManualClock", "ManualScheduler"]
