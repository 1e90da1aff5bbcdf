"""Benchmarks behind one registry. Adding one: a module (or sub-package) here; it registers on import."""

from ..registry import import_submodules
from .base import BENCHMARKS, Benchmark, Metric, Sample, SampleContext, get_benchmark

import_submodules(__name__, __path__)

__all__ = ["BENCHMARKS", "Benchmark", "Metric", "Sample", "SampleContext", "get_benchmark"]
