"""Grid expansion, the append-only results store and the job loop."""
