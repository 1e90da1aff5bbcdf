"""The one run path: the checked experiment (:mod:`.experiment`), jobs and their identity (:mod:`.jobs`),
the append-only results store (:mod:`.store`), job claims between runs (:mod:`.claims`), workers (inline,
per-GPU processes, Ray) and the driver (:mod:`.local`)."""
