"""A slow run of the fake benchmark, for the kill/resume tests: ``python -m tests.killable_run OUT MODE
[DELAY]`` (MODE: a number of CPU workers, or ``gpus`` for one worker process per pretend GPU 3 and 5;
DELAY: seconds per sample, which does not change a job's identity).

Prints ``DONE computed skipped`` when it finishes; exits 130 on Ctrl-C (like the CLI).
"""

from __future__ import annotations

import signal
import sys

from lampe_eval.runner.experiment import Experiment
from lampe_eval.runner.jobs import expand_grid
from lampe_eval.runner.local import run
from tests.fakebench import load_stub

SAMPLES = 5  # per job
DELAY = 0.15  # seconds per sample


def jobs(delay: float = DELAY):
    return expand_grid(
        ["m1"],
        [("rope", {})],
        [("fake", "alpha"), ("fake", "beta")],
        [96, 128],
        use_configs=False,
        options={"fake": {"n": SAMPLES, "delay": delay}},
    )


def main() -> int:
    # a shell starting this in the background (`cmd &`) makes it ignore SIGINT: the test sends one
    signal.signal(signal.SIGINT, signal.default_int_handler)
    out, mode = sys.argv[1], sys.argv[2]
    delay = float(sys.argv[3]) if len(sys.argv) > 3 else DELAY
    # "gpus": one worker process per (pretend) GPU, as on a multi-GPU machine; else N CPU workers
    where = {"gpus": ["3", "5"]} if mode == "gpus" else {"workers": int(mode)}
    try:
        result = run(Experiment.from_jobs(jobs(delay), out, load=load_stub, **where))
    except KeyboardInterrupt:
        print("INTERRUPTED", flush=True)
        return 130
    print(f"DONE {result.computed} {result.skipped} {len(result.failures)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
