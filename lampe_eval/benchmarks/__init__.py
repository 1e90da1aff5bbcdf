"""Benchmarks behind one registry. Adding one: a module here + an import below."""

from . import pg19  # noqa: F401  (registers "pg19")
from .base import BENCHMARKS, Benchmark, Sample, SampleContext, get_benchmark

__all__ = ["BENCHMARKS", "Benchmark", "Sample", "SampleContext", "get_benchmark"]
