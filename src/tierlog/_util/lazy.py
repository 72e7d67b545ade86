"""A module imported on its first use, for the few heavy ones (numba's compiled loops) that a light
command would otherwise import only on the way to something else.

The stand-in replaces itself in its importer's globals with the real module on the first attribute
read, so from then on a use costs what any module global costs: hot loops pay nothing per call. It
is the importer's name that changes, so two threads racing the first use both import (the import
system serialises that) and both store the same module."""

from __future__ import annotations

import importlib
from typing import Any


class LazyModule:
    def __init__(self, module: str, importer_globals: dict[str, Any], name: str) -> None:
        self._module = module
        self._globals = importer_globals
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        module = importlib.import_module(self._module)
        self._globals[self._name] = module
        return getattr(module, attr)

    def __repr__(self) -> str:
        return f"<{self._module}, imported on first use>"
