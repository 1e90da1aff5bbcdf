"""Grid expansion, the append-only results store, workers (inline, per-GPU processes, Ray) and the driver."""
