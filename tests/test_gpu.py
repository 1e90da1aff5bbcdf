"""The GPU check's correctness parts as tests (``pytest -m gpu`` on a machine with CUDA and the dev install):
(a) every method's attention against the portable path and the dense oracle, (b) patched logits against
the unpatched model, (h) every model family on the GPU in bf16 against fp32 on the CPU. Each calls the
function ``perf/gpu_check.py`` (``make gpu-check``, which needs no pytest) runs, with the same sizes and
tolerances; without CUDA they are skipped (the CPU runs of these parts are ``tests/test_gpu_check.py``)."""

import pytest
import torch

from perf.gpu.common import Row
from perf.gpu.correctness import check_attention, check_families, check_model, check_sizes
from perf.gpu.report import failures

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (pytest -m gpu on a GPU)"),
]

CUDA = check_sizes(cuda=True)


def assert_passed(rows: dict[str, Row]) -> None:
    assert rows, "no method was checked"
    failed = failures(rows)
    assert not failed, "\n".join(failed)


def test_a_attention_matches_the_portable_path_and_the_oracle():
    rows: dict[str, Row] = {}
    check_attention(rows, CUDA.attention_length, "cuda", CUDA.dtype, CUDA.tol)
    assert_passed(rows)


def test_b_identity_methods_leave_the_logits_unchanged():
    rows: dict[str, Row] = {}
    check_model(rows, CUDA.model_length, "cuda", CUDA.dtype, CUDA.tol)
    assert_passed(rows)


def test_h_every_family_on_the_gpu_matches_fp32_on_the_cpu():
    rows: dict[str, Row] = {}
    check_families(rows, "cuda", torch.bfloat16)
    assert_passed(rows)
