"""RULERv2 (NVIDIA-NeMo/Skills ``nemo_skills/dataset/ruler2``): 12 tasks in three difficulty ladders,
generated locally at any length with the official random stream, fitting and scoring."""

from .benchmark import Ruler2Benchmark
from .scoring import extract_letter, match_2steps, match_all, match_part, multichoice, word_error_rate

__all__ = [
    "Ruler2Benchmark",
    "extract_letter",
    "match_2steps",
    "match_all",
    "match_part",
    "multichoice",
    "word_error_rate",
]
