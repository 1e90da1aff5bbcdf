"""Benchmarks behind one registry. Adding one: a module here + an import below."""

from . import infinitebench, leval, longbench, pg19, ruler  # noqa: F401  (each registers its benchmark)
from .base import BENCHMARKS, Benchmark, Sample, SampleContext, get_benchmark

__all__ = ["BENCHMARKS", "Benchmark", "Sample", "SampleContext", "get_benchmark"]
