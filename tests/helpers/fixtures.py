"""Fixtures more than one test package uses (imported into each package's conftest)."""

from __future__ import annotations

import uuid

import pytest


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name of this test's own: its node name, made legal, plus a random suffix."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:80]
    return f"{base}-{uuid.uuid4().hex[:6]}"
