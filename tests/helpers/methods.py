"""The position-method tests' shared setup (from ``tests/test_methods_exact.py``): the tiny RoPE base
(head dim ``D``, window ``WINDOW``), random parameters for each position method, and the lists of
position and frequency methods that ``tests/test_methods_exact.py`` checks cover the registry."""

import random

from lampe_eval.methods import RopeBase

D = 16
WINDOW = 96


def base(window: int = WINDOW) -> RopeBase:
    return RopeBase.plain(window, 4, 2, D)  # the tests' query and key heads (Ms-PoE's positions are per head)


def random_params(name: str, rng: random.Random) -> dict:
    variant = rng.choice(["paper", "official"])
    if name == "lampe":
        s1, s2 = rng.randint(0, 20), rng.randint(1, 12)
        mapping = (
            {"m": rng.randint(s1 + s2 + 1, WINDOW)} if rng.random() < 0.5 else {"U": rng.randint(s1 + 2, 90)}
        )
        return {
            "s1": s1,
            "s2": s2,
            **mapping,
            "identity_within_window": False,
            "mscale": rng.choice([1.0, 1.0693]),
            "variant": variant,
        }
    if name == "selfextend":
        return {
            "group_size": rng.randint(2, 9),
            "window": rng.randint(1, 40),
            "scale_base": rng.choice([-1, 64]),
            "variant": rng.choice([variant, "logistic"]),  # logistic: SELF's growing groups
            "rate": rng.choice([0.02, 0.3, 1.0]),  # logistic only (1.0: sizes with no group id skipped)
        }
    if name == "dca":
        chunk = rng.randint(8, 60)
        local = rng.randint(1, chunk)
        extra = 0 if variant == "official" else rng.randint(0, 40)  # official: max_position = CS
        return {
            "chunk_size": chunk,
            "local_window": local,
            "max_position": chunk + local - 1 + extra,
            "mscale_coef": rng.choice([0.0, 0.1]),
            "variant": variant,
        }
    if name == "rerope":
        return {
            "window": rng.randint(1, 50),
            "leaky_k": rng.choice([0.0, 4.0, 16.0]),
            "logn": rng.choice([True, False]),
        }
    if name == "string":
        shift = rng.randint(2, 70)
        return {"shift": shift, "local": rng.randint(0, shift - 1), "variant": variant}
    if name == "lm_infinite":
        local = rng.randint(1, 60)
        return {"n_local": local, "n_global": rng.randint(0, 20), "limit_distance": rng.randint(1, local)}
    if name == "dpe":
        factors = tuple(rng.randint(1, 9) for _ in range(rng.choice([1, 2, 4, 8])))
        groups = rng.choice([(), tuple(range(0, 8, 8 // len(factors))) + (8,)])  # D = 16: 8 frequencies
        if len(factors) == 2 and rng.random() < 0.5:
            groups = (0, 3, 8)
        return {
            "window": rng.randint(1, 40),
            "scale_factors": factors,
            "dimension_groups": groups,
            "variant": variant,
        }
    if name == "ms_poe":
        low = rng.uniform(0.5, 2.0)
        return {
            "min_ratio": low,
            "max_ratio": low + rng.uniform(0.0, 2.0),
            "head_order": rng.choice(["normal", "index"]),
            "skip_layers": rng.randint(0, 2),
        }
    if name == "streamingllm":
        return {"sinks": rng.randint(0, 8), "recent": rng.randint(0, 60)}
    return {}


POSITION_METHODS = [
    "lampe",
    "selfextend",
    "dca",
    "rerope",
    "string",
    "lm_infinite",
    "streamingllm",
    "dpe",
    "ms_poe",
]
FREQUENCY_METHODS = [
    "ntk",
    "yarn",
    "linear",
    "dynamic_ntk",
    "ntk_by_parts",
    "llama3",
    "longrope",
    "cope",
    "mrrope",
]
