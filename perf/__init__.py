"""Performance and GPU scripts (``make bench``, ``make gpu-check``), run as files: ``python perf/<name>.py``.

Not part of the installed package (the datasets live in ``lampe_eval/benchmarks/``); a package only so the
tests can import ``perf.gpu_check`` and its parts (``perf/gpu/``) and mypy checks the folder
(``make typecheck``)."""
