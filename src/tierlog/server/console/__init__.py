"""The broker's read-only web console (``console.listener``): server-rendered pages of its state."""

from tierlog.server.console.server import Console

__all__ = ["Console"]
