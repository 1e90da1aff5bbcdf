"""What a process lampe-eval starts (a runner's worker, an engine's process) does to never outlive the
process that started it."""

from __future__ import annotations

import signal


def die_with_parent() -> None:
    """Linux: the kernel kills this process (SIGKILL) when its parent dies, a SIGKILLed one included, so no
    worker or engine process is left behind holding memory (a GPU's). Elsewhere: nothing."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass
