"""The name -> class registry every pluggable kind keeps one of: methods (``METHODS``), benchmarks
(``BENCHMARKS``), backends (``BACKENDS``) and report formats (``REPORT_FORMATS``).

A class joins its kind's registry with the decorator ``register(name)``, which sets the class's ``name``,
runs the registry's ``check`` on it (what the kind must declare: a benchmark's metrics, a backend's
placement, a report format's files; a ``TypeError`` at import) and refuses a name registered twice;
``get`` of an unknown name raises one ``UnknownNameError`` line with the closest known name, and
``remove`` forgets one (a plugin's, a test's).

The packages ``lampe_eval.methods`` and ``lampe_eval.benchmarks`` import every module they contain
(:func:`import_submodules`), so adding a method or a benchmark is one module and no list to edit;
``lampe_eval.backends`` imports the backends it ships, the report formats are defined beside their
registry, and a module of one's own registers when it is imported (``--import``, ``imports=``).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import Generic, TypeVar

from .errors import unknown

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str, check: Callable[[type[T]], None] | None = None) -> None:
        self.kind = kind
        self._check = check
        self._items: dict[str, type[T]] = {}

    def register(self, name: str) -> Callable[[type[T]], type[T]]:
        def decorator(cls: type[T]) -> type[T]:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            cls.name = name  # type: ignore[attr-defined]
            if self._check is not None:
                self._check(cls)
            self._items[name] = cls
            return cls

        return decorator

    def get(self, name: str) -> type[T]:
        if name not in self._items:
            raise unknown(self.kind, name, list(self._items))
        return self._items[name]

    def remove(self, name: str) -> None:
        """Forget a registration (a plugin's, or a test's own)."""
        self._items.pop(name, None)

    def names(self) -> list[str]:
        return list(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items


def import_submodules(package: str, path: list[str]) -> None:
    """Import every module and sub-package of ``package`` (whose ``__path__`` is ``path``), in name order."""
    for info in sorted(pkgutil.iter_modules(path), key=lambda m: m.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"{package}.{info.name}")
