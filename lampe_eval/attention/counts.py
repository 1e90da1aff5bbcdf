"""What a call costs beyond its arithmetic: attention kernel launches, host synchronisations, memory.

On a GPU a prefill's time is also its number of kernel launches and of blocking GPU-to-CPU reads (a
tensor turned into a Python number, or an op whose output size depends on data). :class:`CountOps`
intercepts aten ops below autograd (a ``TorchDispatchMode``), so it counts what would be launched on any
device, CPU included: the tests and ``perf/attention_speed.py`` hold the engine to its budget here,
and ``make gpu-check`` reports the same counts on the GPU.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# fused attention kernels (PyTorch's FlashAttention-2 copy, its CPU flash kernel, memory-efficient
# attention) and the optional flash-attn wheel's op
_ATTENTION_MARKS = ("flash_attention", "efficient_attention", "flash_attn", "scaled_dot_product")
# ops that read a device value on the host: `.item()`/`int()`/`bool()` (``_local_scalar_dense``) and
# ops whose output size depends on data
_SYNC_OPS = ("aten._local_scalar_dense", "aten.nonzero", "aten.masked_select", "aten.unique")


def op_name(func: Any) -> str:
    """``aten.add.Tensor`` -> ``aten.add`` (the overload dropped)."""
    name = str(getattr(func, "__name__", func))
    packet = getattr(func, "overloadpacket", None)
    return str(packet) if packet is not None else name


def is_attention(name: str) -> bool:
    return any(mark in name for mark in _ATTENTION_MARKS)


def is_sync(name: str) -> bool:
    return name in _SYNC_OPS


class CountOps(TorchDispatchMode):
    """Counts every aten op run inside ``with CountOps() as counts:`` (``counts.ops`` by name), the fused
    attention kernels among them (``counts.attention``) and the host syncs (``counts.syncs``)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[op_name(func)] += 1
        return func(*args, **(kwargs or {}))

    @property
    def attention(self) -> int:
        return sum(n for name, n in self.ops.items() if is_attention(name))

    @property
    def syncs(self) -> int:
        return sum(n for name, n in self.ops.items() if is_sync(name))

    @property
    def launches(self) -> int:
        """Every op (views included): an upper bound on kernel launches."""
        return sum(self.ops.values())


def count(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, CountOps]:
    """``fn(*args, **kwargs)`` under :class:`CountOps`: (its result, the counts)."""
    with CountOps() as counts, torch.no_grad():
        result = fn(*args, **kwargs)
    return result, counts


def peak_memory(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, int]:
    """``fn(*args, **kwargs)`` under ``torch.profiler`` with ``profile_memory``: (its result, the most CPU
    bytes it held at once above what was allocated before). Read from the allocator's running total at each
    allocation and free (an op's net memory would hide what its children held before it freed them).
    Slow (every op is recorded): for tests on small inputs and benchmarks."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof, torch.no_grad():
        result = fn(*args, **kwargs)
    nodes = sorted(_allocations(prof.profiler.kineto_results.experimental_event_tree()), key=_start)
    events = [node.extra_fields for node in nodes if node.extra_fields.device.type == "cpu"]
    if not events:
        return result, 0
    # the running total also counts what earlier profiled calls left allocated: start from the first event's
    start = events[0].total_allocated - events[0].alloc_size
    return result, max(event.total_allocated for event in events) - start


def _allocations(nodes: Any) -> Any:
    """The allocation and free records (with the allocator's running total) under profiler event nodes."""
    from torch._C._profiler import _EventType

    for node in nodes:
        if node.tag == _EventType.Allocation:
            yield node
        yield from _allocations(node.children)


def _start(node: Any) -> int:
    return int(node.start_time_ns)
