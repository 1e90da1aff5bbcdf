"""BABILong (booydar/babilong): bAbI reasoning facts hidden in long book text, pre-built or generated."""

from .benchmark import Babilong, format_input
from .scoring import compare_answers, preprocess_output

__all__ = ["Babilong", "compare_answers", "format_input", "preprocess_output"]
