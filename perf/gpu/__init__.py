"""The parts of the GPU check (``make gpu-check``, ``perf/gpu_check.py``, whose docstring lists them):
shared shapes and inputs (``common``), the correctness parts (``correctness``, also ``pytest -m gpu``),
speed (``speed``), the whole random model (``model``), the paged attention (``paged``), the table and the
parts' crash handling (``report``), the command line (``run``)."""
