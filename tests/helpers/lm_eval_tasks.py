"""The local lm-evaluation-harness tasks (``tests/fixtures/lm_eval``) and how their results are read (from
``tests/test_lm_eval.py``, shared with ``tests/test_serve.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

TASK_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "lm_eval"


def responses(results: dict[str, Any], task: str) -> list[Any]:
    """Per document, in document order: the filtered model responses (log-likelihoods or text)."""
    samples = sorted(results["samples"][task], key=lambda s: s["doc_id"])
    return [s["filtered_resps"] for s in samples]
