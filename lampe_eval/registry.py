"""The name -> entry registry every pluggable kind keeps one of: methods (``METHODS``), benchmarks
(``BENCHMARKS``), backends (``BACKENDS``) and report formats (``REPORT_FORMATS``) register classes; model
families (``FAMILIES``) register instances.

A class joins its kind's :class:`Registry` with the decorator ``register(name)``, which sets the class's
``name``, runs the registry's ``check`` on it (what the kind must declare: a benchmark's metrics, a
backend's placement, a report format's files; a ``TypeError`` at import) and refuses a name registered
twice. A family is an instance that carries its own ``name``: it joins :class:`InstanceRegistry` with
``FAMILIES.add(family)``, checked and refused alike (and a family claiming an attention class or model type
another one claims is refused, so lookups never depend on the order of registration). For both, ``get`` of
an unknown name raises one ``UnknownNameError`` line with the closest known name, and ``remove`` forgets one
(a plugin's, a test's).

The packages ``lampe_eval.methods``, ``lampe_eval.benchmarks`` and ``lampe_eval.families`` import every
module they contain (:func:`import_submodules`), so adding a method, a benchmark or a model family is one
module and no list to edit; ``lampe_eval.backends`` imports the backends it ships, the report formats are
defined beside their registry, and a module of one's own registers when it is imported (``--import``,
``imports=``).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from .errors import unknown

T = TypeVar("T")
E = TypeVar("E")  # what a registry holds: a class, or an instance


class _Entries(Generic[E]):
    """What every registry shares: entries by name, in the order they registered."""

    def __init__(self, kind: str, check: Callable[[E], None] | None = None) -> None:
        self.kind = kind
        self._check = check
        self._items: dict[str, E] = {}

    def _refuse_twice(self, name: str) -> None:
        if name in self._items:
            raise ValueError(f"{self.kind} {name!r} registered twice")

    def _store(self, name: str, entry: E) -> E:
        if self._check is not None:
            self._check(entry)
        self._items[name] = entry
        return entry

    def get(self, name: str) -> E:
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


class Registry(_Entries[type[T]]):
    """Classes by name: ``@REGISTRY.register(name)`` on the class."""

    def register(self, name: str) -> Callable[[type[T]], type[T]]:
        def decorator(cls: type[T]) -> type[T]:
            self._refuse_twice(name)  # before the class is renamed
            cls.name = name  # type: ignore[attr-defined]
            return self._store(name, cls)

        return decorator


class Named(Protocol):
    @property
    def name(self) -> str: ...


N = TypeVar("N", bound=Named)


class InstanceRegistry(_Entries[N]):
    """Instances that carry their own ``name`` (model families): ``REGISTRY.add(instance)``."""

    def add(self, entry: N) -> N:
        self._refuse_twice(entry.name)
        return self._store(entry.name, entry)

    def values(self) -> list[N]:
        """Every entry, in the order they registered."""
        return list(self._items.values())


def import_submodules(package: str, path: list[str]) -> None:
    """Import every module and sub-package of ``package`` (whose ``__path__`` is ``path``), in name order."""
    for info in sorted(pkgutil.iter_modules(path), key=lambda m: m.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"{package}.{info.name}")
