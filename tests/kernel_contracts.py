"""CPU emulations of the CUDA kernel contracts the engine calls (``docs/gpu.md`` gives the sources).

They reproduce what the caller can observe, not how the kernel computes it: argument checks (layout
[B, S, H, D], contiguous last dimension, fp16/bf16, heads divisible), FlashAttention-2's mask (causal
aligned to the bottom right, ``window_size=(left, right)`` with its normalisation in ``flash_api.cpp``),
GQA head grouping, and the outputs: out in the input dtype, LSE fp32 [B, H, Sq] in natural log, a row with
no visible key giving out 0 and LSE **+inf**.
"""

from __future__ import annotations

import importlib.machinery
import types

import torch


def fa2_visible(sq: int, sk: int, causal: bool, window: tuple[int, int]) -> torch.Tensor:
    """Boolean [sq, sk]: which keys each query sees (flash_api.cpp ``mha_fwd`` + ``set_params_fprop``)."""
    left, right = window
    if left >= sk:
        left = -1
    if right >= sk:
        right = -1
    if sq == 1:  # "causal=true is the same as causal=false in this case"
        causal = False
    if causal:
        right = 0
    if left < 0 and right >= 0:
        left = sk
    if left >= 0 and right < 0:
        right = sk
    i = torch.arange(sq)[:, None]
    j = torch.arange(sk)[None, :]
    shift = sk - sq  # the docstring: keys [i + sk - sq - left, i + sk - sq + right], inclusive
    keep = torch.ones(sq, sk, dtype=torch.bool)
    if left >= 0:
        keep &= j >= i + shift - left
    if right >= 0:
        keep &= j <= i + shift + right
    return keep


class ContractError(AssertionError):
    """The caller broke the kernel's contract (the real kernel would raise or misread the tensors)."""


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, half_only: bool) -> None:
    if q.dim() != 4 or k.dim() != 4 or v.shape != k.shape:
        raise ContractError(f"dense layout [B, S, H, D] expected, got {tuple(q.shape)} {tuple(k.shape)}")
    if q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise ContractError("batch and head_dim of q and k must agree")
    if q.shape[2] % k.shape[2] != 0:
        raise ContractError("Number of heads in key/value must divide number of heads in query")
    if any(t.stride(-1) != 1 for t in (q, k, v)):
        raise ContractError("Input tensor must have contiguous last dimension")
    if half_only and not all(t.dtype in (torch.float16, torch.bfloat16) for t in (q, k, v)):
        raise ContractError("FlashAttention only support fp16 and bf16 data type")
    if q.shape[3] > 256:
        raise ContractError("FlashAttention forward only supports head dimension at most 256")


def fa2_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    causal: bool,
    window: tuple[int, int],
    half_only: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out [B, Sq, H, D] in q's dtype, lse [B, H, Sq] fp32) as FlashAttention-2 returns them."""
    _check(q, k, v, half_only)
    batch, sq, heads, dim = q.shape
    sk, hk = k.shape[1], k.shape[2]
    keep = fa2_visible(sq, sk, causal, window)
    group = heads // hk  # query heads [g * group, (g + 1) * group) read KV head g
    kf = k.float().repeat_interleave(group, dim=2)
    vf = v.float().repeat_interleave(group, dim=2)
    scores = torch.einsum("bqhd,bkhd->bhqk", q.float(), kf) * scale
    scores = scores.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    empty = ~keep.any(dim=1)
    probs = torch.exp(scores - lse[..., None]).nan_to_num(0.0)
    out = torch.einsum("bhqk,bkhd->bqhd", probs, vf)
    out = out.masked_fill(empty[None, :, None, None], 0.0)  # "the output will be zero"
    lse = lse.masked_fill(empty, float("inf"))  # softmax.h: sum == 0 -> INFINITY
    return out.to(q.dtype), lse


class FlashAttnEmulator:
    """``flash_attn.flash_attn_func`` (v2.8.3 signature); records every call."""

    def __init__(self, half_only: bool = True) -> None:
        self.half_only = half_only
        self.calls: list[dict] = []

    def __call__(
        self,
        q,
        k,
        v,
        dropout_p=0.0,
        softmax_scale=None,
        causal=False,
        window_size=(-1, -1),
        softcap=0.0,
        alibi_slopes=None,
        deterministic=False,
        return_attn_probs=False,
    ):
        if dropout_p or softcap or alibi_slopes is not None:
            raise ContractError("the emulation covers inference without softcap or ALiBi only")
        scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
        self.calls.append(
            {"sq": q.shape[1], "sk": k.shape[1], "causal": causal, "window": tuple(window_size)}
        )
        out, lse = fa2_forward(q, k, v, scale, causal, tuple(window_size), self.half_only)
        if return_attn_probs:
            return out, lse, torch.empty(0)  # S_dmask is empty unless dropout_p > 0
        return out


def fake_flash_attn(emulator: FlashAttnEmulator) -> types.ModuleType:
    """A stand-in ``flash_attn`` package whose ``flash_attn_func`` is the emulation."""
    module = types.ModuleType("flash_attn")
    module.__spec__ = importlib.machinery.ModuleSpec("flash_attn", None)
    module.flash_attn_func = emulator  # type: ignore[attr-defined]
    return module


class TorchFlashEmulator:
    """``torch.ops.aten._flash_attention_forward`` (torch 2.13 schema; ``None`` windows mean -1)."""

    def __init__(self, half_only: bool = True) -> None:
        self.half_only = half_only
        self.calls: list[dict] = []

    def __call__(
        self,
        query,
        key,
        value,
        cum_seq_q,
        cum_seq_k,
        max_q,
        max_k,
        dropout_p,
        is_causal,
        return_debug_mask,
        *,
        scale=None,
        window_size_left=None,
        window_size_right=None,
        seqused_k=None,
        alibi_slopes=None,
        block_table=None,
        num_splits=None,
    ):
        if cum_seq_q is not None or cum_seq_k is not None:
            raise ContractError("the emulation covers the dense (not varlen) call only")
        if (max_q, max_k) != (query.shape[1], key.shape[1]):
            raise ContractError(f"max_q/max_k {max_q}/{max_k} do not match the dense sequence lengths")
        window = (
            -1 if window_size_left is None else window_size_left,
            -1 if window_size_right is None else window_size_right,
        )
        scale = scale if scale is not None else query.shape[-1] ** -0.5
        self.calls.append({"sq": query.shape[1], "sk": key.shape[1], "causal": is_causal, "window": window})
        out, lse = fa2_forward(query, key, value, scale, is_causal, window, self.half_only)
        empty = torch.empty(0)
        return out, lse, empty, empty, empty


class CudnnEmulator:
    """``torch.ops.aten._scaled_dot_product_cudnn_attention`` (torch 2.13 schema; shapes as its meta function
    in ``torch/_meta_registrations.py``): [B, H, S, D] in and out, LSE fp32 [B, H, Sq, 1] in natural log (the
    H100 run: equal to FlashAttention-2's within 7e-6), ``is_causal`` aligned top-left as in
    ``scaled_dot_product_attention`` (a causal piece with fewer queries than keys comes out wrong). ``gqa``:
    whether fewer KV heads are accepted (PyTorch 2.11 on the H100 did); without, the RuntimeError a build
    that lacks it raises."""

    def __init__(self, gqa: bool = True, half_only: bool = True) -> None:
        self.gqa = gqa
        self.half_only = half_only
        self.calls: list[dict] = []

    def __call__(
        self,
        query,
        key,
        value,
        attn_bias,
        compute_log_sumexp,
        dropout_p=0.0,
        is_causal=False,
        return_debug_mask=False,
        *,
        scale=None,
    ):
        if attn_bias is not None or dropout_p or return_debug_mask:
            raise ContractError("the emulation covers inference without a bias only")
        if query.shape[1] != key.shape[1] and not self.gqa:
            raise RuntimeError("cuDNN attention: query and key heads differ")
        batch, heads, sq, dim = query.shape
        sk = key.shape[2]
        _check(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), self.half_only)
        scale = scale if scale is not None else dim**-0.5
        self.calls.append({"sq": sq, "sk": sk, "causal": is_causal, "heads": (heads, key.shape[1])})
        group = heads // key.shape[1]
        kf, vf = (x.float().repeat_interleave(group, dim=1) for x in (key, value))
        scores = torch.einsum("bhqd,bhkd->bhqk", query.float(), kf) * scale
        if is_causal:  # aligned top-left: row i sees keys 0..i, whatever sk is
            keep = torch.arange(sk)[None, :] <= torch.arange(sq)[:, None]
            scores = scores.masked_fill(~keep, float("-inf"))
        lse = torch.logsumexp(scores, dim=-1)
        out = torch.einsum("bhqk,bhkd->bhqd", torch.exp(scores - lse[..., None]), vf).to(query.dtype)
        lse = lse[..., None] if compute_log_sumexp else torch.empty(0)
        seed = offset = torch.empty((), dtype=torch.long)
        return out, lse, None, None, sq, sk, seed, offset, None
