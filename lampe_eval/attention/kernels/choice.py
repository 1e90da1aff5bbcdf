"""Which kernels run a patched layer's attention: one choice per engine (:func:`select`), made once from
the device, the dtype, what the layers need (:class:`Features`) and one explicit override, passed down to
the calls and written into every record's identity (:meth:`KernelChoice.label`).

Prefill (:data:`PREFILL_KERNELS`; a prefill is a few dense pieces, ``engine.py``):

- ``cudnn``: cuDNN's fused attention for causal squares and rectangles of 128 rows or more, PyTorch's
  FlashAttention-2 for the rest (``flash.py``); ``auto`` on CUDA in fp16/bf16 on Hopper or newer.
- ``flash_attn``: the flash-attn wheel (the optional ``gpu`` extra); ``auto`` on older GPUs where installed.
- ``torch``: PyTorch's own copy of FlashAttention-2; ``auto`` on older GPUs otherwise.
- ``cpu``: PyTorch's CPU flash kernel (``cpu.py``); ``auto`` on CPU.
- ``portable``: exact fp32 matmuls (``portable.py``); ``auto`` elsewhere (fp32 on CUDA, other devices) and
  wherever logits are soft-capped (Gemma 2: no fused kernel here computes them).

Decode (:data:`DECODE_PATHS`; one new token per sequence):

- ``prefill-kernel``: the Hugging Face backend's KV cache: each part of the query on the prefill kernel.
- ``paged-triton``: vLLM's paged cache, one Triton kernel per key copy (``paged_triton.py``): ``auto`` on
  CUDA with Triton, a head dim that is a power of two and no soft cap; a cache whose block size is not a
  power of two decodes on ``paged-torch`` (the engine's block size is fixed for an engine release).
- ``paged-engine``: vLLM's paged cache on CPU (keys stored as columns): the engine's own paged kernel for a
  batch whose rows each see one causal run of their keys, where it reads that layout (checked once at the
  engine's start), ``paged-torch`` for the rest; ``auto`` on CPU.
- ``paged-torch``: vLLM's paged cache, PyTorch gathers and batched matmuls (any device; the reference the
  other two are held to).

The override is ``LAMPE_EVAL_KERNEL`` (inherited by worker and engine processes): ``auto`` (the default)
or a label as records spell it, ``PREFILL`` or ``PREFILL+DECODE``, either side possibly ``auto``
(``auto+paged-torch``); a paged decode path applies to vLLM's paged cache only (the Hugging Face backend,
which decodes on its prefill kernel, records no decode path). A choice the layers cannot run is refused in
one line, never replaced.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from dataclasses import dataclass
from typing import Any

import torch

from ...errors import LampeEvalError
from .flash import cudnn_preferred, flash_attn_installed

ENV = "LAMPE_EVAL_KERNEL"
AUTO = "auto"
PREFILL_KERNELS = ("cudnn", "flash_attn", "torch", "cpu", "portable")
DECODE_PATHS = ("prefill-kernel", "paged-triton", "paged-engine", "paged-torch")
FLASH_KERNELS = ("cudnn", "flash_attn", "torch")  # FlashAttention's contract: CUDA, fp16/bf16
HALF = (torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class Features:
    """What the patched layers need of their kernels. ``softcap``: logits soft-capped (Gemma 2);
    ``paged``: the engine keeps keys in a paged cache (vLLM) rather than the HF KV cache; ``head_dim``: the
    paged decode's head dim (the Triton kernel takes powers of two)."""

    softcap: bool = False
    paged: bool = False
    head_dim: int = 0


@dataclass(frozen=True)
class Installed:
    """What this machine offers beyond PyTorch (probed once; the tests give their own)."""

    flash_attn: bool
    triton: bool
    cudnn_preferred: bool  # a GPU where cuDNN's attention is the fastest (Hopper or newer, cuDNN 9)

    @classmethod
    def probe(cls, device: torch.device) -> Installed:
        cuda = device.type == "cuda"
        index = device.index if device.index is not None else (torch.cuda.current_device() if cuda else 0)
        return cls(flash_attn_installed(), triton_installed(), cuda and cudnn_preferred(index))


@dataclass(frozen=True)
class KernelChoice:
    """The kernels one engine's patched layers run: ``prefill`` (:data:`PREFILL_KERNELS`) and ``decode``
    (:data:`DECODE_PATHS`)."""

    prefill: str
    decode: str = "prefill-kernel"

    def label(self) -> str:
        """How records name it: the prefill kernel, and the decode path where it is not the prefill kernel
        itself (``cpu``, ``cudnn+paged-triton``)."""
        return self.prefill if self.decode == "prefill-kernel" else f"{self.prefill}+{self.decode}"


@functools.cache
def triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


def override() -> str:
    """The override ``LAMPE_EVAL_KERNEL`` asks for (``auto`` when unset), checked for its spelling."""
    text = os.environ.get(ENV, AUTO).strip().lower() or AUTO
    parse(text)
    return text


def parse(text: str) -> tuple[str, str]:
    """``PREFILL`` or ``PREFILL+DECODE`` -> (prefill, decode), each a name or ``auto``."""
    prefill, _, decode = text.partition("+")
    if prefill not in (AUTO, *PREFILL_KERNELS) or decode not in ("", AUTO, *DECODE_PATHS):
        raise LampeEvalError(
            f"{ENV}={text!r}: choose auto, a prefill kernel ({', '.join(PREFILL_KERNELS)}) or "
            f"PREFILL+DECODE with a decode path ({', '.join(DECODE_PATHS)})"
        )
    return prefill, decode or AUTO


def select(
    device: torch.device | str,
    dtype: torch.dtype,
    features: Features = Features(),
    override: str = AUTO,
    installed: Installed | None = None,
) -> KernelChoice:
    """The kernels for layers on ``device`` in ``dtype`` needing ``features``; ``override``: ``auto`` or
    a label (``LAMPE_EVAL_KERNEL``: :func:`override`)."""
    device = torch.device(device)
    have = installed or Installed.probe(device)
    asked_prefill, asked_decode = parse(override)
    prefill = _prefill(device, dtype, features, have) if asked_prefill == AUTO else asked_prefill
    # a paged decode asked for applies to a paged cache only: the HF cache decodes on its prefill kernel
    ignored = asked_decode != "prefill-kernel" and not features.paged
    decode = _decode(device, features, have) if asked_decode == AUTO or ignored else asked_decode
    choice = KernelChoice(prefill, decode)
    why = refusal(choice, device, dtype, features, have)
    if why:
        raise LampeEvalError(f"{ENV}={override}: {why}")
    return choice


def _prefill(device: torch.device, dtype: torch.dtype, features: Features, have: Installed) -> str:
    if features.softcap:
        return "portable"
    if device.type == "cpu":
        return "cpu"
    if device.type == "cuda" and dtype in HALF:
        return "cudnn" if have.cudnn_preferred else "flash_attn" if have.flash_attn else "torch"
    return "portable"


def _decode(device: torch.device, features: Features, have: Installed) -> str:
    if not features.paged:
        return "prefill-kernel"
    if device.type == "cpu":
        return "paged-engine"
    if device.type == "cuda" and have.triton and _power_of_two(features.head_dim) and not features.softcap:
        return "paged-triton"
    return "paged-torch"


def refusal(
    choice: KernelChoice, device: torch.device, dtype: torch.dtype, features: Features, have: Installed
) -> str | None:
    """Why the layers cannot run ``choice`` (one line), or None."""
    prefill, decode = choice.prefill, choice.decode
    if features.softcap and (prefill != "portable" or decode == "paged-triton"):
        return "soft-capped logits run on the portable prefill and the paged-torch or paged-engine decode"
    if prefill in FLASH_KERNELS and (device.type != "cuda" or dtype not in HALF):
        return (
            f"the {prefill} kernel runs on CUDA in float16 or bfloat16, not {device.type} in {_name(dtype)}"
        )
    if prefill == "flash_attn" and not have.flash_attn:
        return "the flash-attn wheel is not installed (pip install 'lampe-eval[gpu]')"
    if prefill == "cpu" and device.type != "cpu":
        return f"the cpu kernel runs on CPU, not {device.type}"
    if decode == "prefill-kernel" and features.paged:
        return "vLLM's paged cache decodes on paged-triton, paged-engine or paged-torch, not prefill-kernel"
    if decode == "paged-triton" and not (device.type == "cuda" and have.triton):
        return "the paged-triton decode runs on CUDA with Triton installed"
    if decode == "paged-triton" and not _power_of_two(features.head_dim):
        return f"the paged-triton decode takes a head dim that is a power of two, not {features.head_dim}"
    if decode == "paged-engine" and device.type != "cpu":
        return "the paged-engine decode is vLLM's CPU kernel: use paged-triton or paged-torch on a GPU"
    return None


def describe(device: Any = None, dtype: torch.dtype = torch.bfloat16, features: Features = Features()) -> str:
    """The label of the kernels layers on ``device`` in ``dtype`` run with this process's override."""
    return select(device or "cpu", dtype, features, override()).label()


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
