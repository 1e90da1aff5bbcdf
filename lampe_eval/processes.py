"""Processes lampe-eval starts (a runner's worker, an engine's processes): what each does to never outlive
the process that started it, and the environment it is started with."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager


def die_with_parent() -> None:
    """Linux: the kernel kills this process (SIGKILL) when its parent dies, a SIGKILLed one included, so no
    worker or engine process is left behind holding memory (a GPU's). Elsewhere: nothing."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """``values`` in this process's environment while the block runs, the previous ones put back."""
    kept = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in kept.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
