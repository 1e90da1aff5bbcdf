"""How far ``variant=paper`` is from ``variant=official``: the relative positions of both, pair by pair.

For each setting and length, every query row (or, past 2K tokens, 512 evenly spaced rows plus the rows at
the region boundaries) is compared key by key. A pair that the official code counts twice is matched with
the official term nearest the paper's position; the other term is reported as an extra softmax term
(as a share of the causal pairs). DCA's defaults differ between the variants (the paper's values vs the
code's), so its "defaults" row compares two settings; with the same values the positions are equal.
Printed as a Markdown table (docs/variants-smollm2.md quotes it):

    python perf/position_differences.py
"""

from __future__ import annotations

import numpy as np
import torch

from lampe_eval.attention.reference import segment_pairs
from lampe_eval.methods import RopeBase, create_method
from lampe_eval.methods.lampe import official_use_length

LLAMA3_FIT = (6204.409324666837, 1.0493097327094324e-04, -2.466638011138158)  # remap_uselen("llama3")


def rope_base(window: int) -> RopeBase:
    return RopeBase(inv_freq=torch.ones(1), attention_scaling=1.0, window=window, head_dim=2)


def row_terms(method, window: int, length: int, row: int) -> tuple[np.ndarray, np.ndarray]:
    """(positions [length, 2] sorted, NaN-padded; count of terms per key) for one prefill row."""
    plan = method.plan(rope_base(window), length, length)
    table = np.full((length, 2), np.nan)
    count: np.ndarray = np.zeros(length, dtype=np.int64)
    for mask, pe in segment_pairs(plan, row, 1, length):
        keys = mask[0].nonzero()[:, 0].numpy()
        table[keys, count[keys]] = pe[0, keys].numpy()
        count[keys] += 1
    return table, count


def rows_to_check(length: int, boundaries: list[int]) -> list[int]:
    if length <= 2048:
        return list(range(length))
    spread = np.linspace(0, length - 1, 512).astype(int).tolist()
    near = [b + k for b in boundaries for k in (-1, 0, 1)]
    return sorted({r for r in spread + near if 0 <= r < length})


def compare(name: str, params: dict, window: int, length: int, boundaries: list[int]) -> dict:
    paper = create_method(name, window, length, variant="paper", **params)
    official = create_method(name, window, length, variant="official", **params)
    largest_gap, total_gap, differing, extra, pairs = 0.0, 0.0, 0, 0, 0
    for row in rows_to_check(length, boundaries):
        ours, _ = row_terms(paper, window, length, row)
        theirs, count = row_terms(official, window, length, row)
        keys = np.arange(row + 1)
        gap = np.nanmin(np.abs(theirs[keys] - ours[keys, :1]), axis=1)
        largest_gap = max(largest_gap, float(gap.max()))
        total_gap += float(gap.sum())
        differing += int((gap > 0).sum())
        extra += int((count[keys] - 1).sum())
        pairs += row + 1
    return {
        "largest": largest_gap,
        "mean": total_gap / pairs,
        "differing": differing / pairs,
        "extra": extra / pairs,
    }


def settings() -> list[tuple[str, str, dict, int, int]]:
    """(label, method, params, window, length)."""
    out: list[tuple[str, str, dict, int, int]] = []
    out.append(("lampe, U 300, s1 64, s2 25", "lampe", lampe_params(64, 25, 300), 8192, 1000))
    for length in (8192, 16384, 32768, 65536):
        U = official_use_length(length, *LLAMA3_FIT)
        label = f"lampe, Llama-3 fit (U {U}), s1 512, s2 200"
        out.append((label, "lampe", lampe_params(512, 200, U), 8192, length))
    for length in (12288, 16384):
        out.append(("lampe, SmolLM2 config (pg19)", "lampe", smollm2_lampe(length), 8192, length))
    for label, group, neighbour, length in [
        ("selfextend G 21, w 2048 (LaMPE's Llama-3 128K)", 21, 2048, 8192),
        ("selfextend G 21, w 2048 (LaMPE's Llama-3 128K)", 21, 2048, 32768),
        ("selfextend G 4, w 2048 (default, 8K window, 12K)", 4, 2048, 12288),
        ("selfextend G 5, w 2048 (default, 8K window, 16K)", 5, 2048, 16384),
    ]:
        out.append((label, "selfextend", {"group_size": group, "window": neighbour}, 8192, length))
    string = {"shift": 2703, "local": 128}
    out += [("string S 2703, W 128 (8K window)", "string", string, 8192, n) for n in (4096, 8192, 16384)]
    configured = {"chunk_size": 5120, "local_window": 1025, "max_position": 6144}  # dca-llama3 config
    out += [
        ("dca 5120 / 1025 / 6144 (the Llama-3 config)", "dca", configured, 8192, n) for n in (16384, 32768)
    ]
    out += [("dca defaults (paper 6144 / 2048 / 8191 vs code 5120 / 1025 / 6144)", "dca", {}, 8192, 16384)]
    return out


def lampe_params(s1: int, s2: int, U: int) -> dict:
    return {"s1": s1, "s2": s2, "U": U, "identity_within_window": False}


def smollm2_lampe(length: int) -> dict:
    from lampe_eval.method_configs import load_method_params

    return load_method_params("lampe", "smollm2-135m", length, "pg19")


def boundaries_of(name: str, params: dict, length: int) -> list[int]:
    if name == "lampe":
        s1, s2 = params["s1"], params["s2"]
        return [s1, 2 * s1, length - s2 - 300, length - s2, length - 1]
    if name == "selfextend":
        return [params["window"], length - 1]
    if name == "string":
        return [params["shift"], length - 1]
    return [length - 1]


def main() -> None:
    columns = ["setting", "length", "largest difference", "mean difference", "pairs elsewhere", "extra terms"]
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for label, name, params, window, length in settings():
        r = compare(name, params, window, length, boundaries_of(name, params, length))
        cells = [label, length, f"{r['largest']:.3g}", f"{r['mean']:.3g}"]
        cells += [f"{100 * r['differing']:.2f}%", f"{100 * r['extra']:.3f}%"]
        print("| " + " | ".join(str(c) for c in cells) + " |")


if __name__ == "__main__":
    main()
