"""RULER (NVIDIA/RULER): 13 synthetic tasks at any length, generated locally, with the official scoring."""

from .benchmark import RulerBenchmark, generate_samples
from .scoring import average_over_tasks, length_averages, string_match_all, string_match_part

__all__ = [
    "RulerBenchmark",
    "average_over_tasks",
    "generate_samples",
    "length_averages",
    "string_match_all",
    "string_match_part",
]
