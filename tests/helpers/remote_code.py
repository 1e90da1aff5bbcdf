"""A model directory that asks to run its own code (from ``tests/test_bad_input_2.py``, shared with
``tests/test_lm_eval.py``), and the one line that refuses it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.cli import one_line

NEVER_EXECUTES = "lampe-eval never executes a model's own code (no trust_remote_code)"
EVIL_MODULE = """import pathlib
pathlib.Path({marker!r}).write_text("executed")
from transformers import PretrainedConfig, PreTrainedModel, PreTrainedTokenizer
class EvilConfig(PretrainedConfig):
    model_type = "evil"
class EvilForCausalLM(PreTrainedModel):
    config_class = EvilConfig
class EvilTokenizer(PreTrainedTokenizer):
    pass
"""


def remote_code_model(root: Path, *, in_tokenizer_config: bool = False) -> tuple[Path, Path]:
    """A model directory whose config.json (or tokenizer_config.json) maps the Auto classes to its own
    modules, each of which creates ``marker`` when imported: (directory, marker)."""
    model, marker = root / "evil-model", root / "EXECUTED"
    model.mkdir(parents=True)
    auto_map = {
        "AutoConfig": "configuration_evil.EvilConfig",
        "AutoModelForCausalLM": "modeling_evil.EvilForCausalLM",
        "AutoTokenizer": ["tokenization_evil.EvilTokenizer", None],
    }
    config = {"model_type": "evil", "architectures": ["EvilForCausalLM"], "max_position_embeddings": 4096}
    if in_tokenizer_config:
        config["model_type"] = "llama"
        tokenizer_config = {
            "tokenizer_class": "EvilTokenizer",
            "auto_map": {"AutoTokenizer": auto_map["AutoTokenizer"]},
        }
        (model / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    else:
        config["auto_map"] = auto_map
    (model / "config.json").write_text(json.dumps(config))
    for module in ("configuration_evil", "modeling_evil", "tokenization_evil"):
        (model / f"{module}.py").write_text(EVIL_MODULE.format(marker=str(marker)))
    return model, marker


# why remote_code_model's checkpoint is refused: transformers implements neither what its config.json nor
# what its tokenizer_config.json names (an auto_map alone is no reason: tests/test_model_sources.py)
WHY_REFUSED = {
    "config.json": "auto_map in config.json: transformers has no model_type 'evil'",
    "tokenizer_config.json": (
        "auto_map in tokenizer_config.json: transformers has no tokenizer class 'EvilTokenizer'"
    ),
}


def refused(err: str, model: Path, file: str = "config.json") -> None:
    line = one_line(err)
    assert line == (
        f"error: model directory {str(model)!r} asks to run its own code ({WHY_REFUSED[file]}); "
        f"{NEVER_EXECUTES}: convert the model to an architecture that transformers implements "
        "(e.g. save it as LlamaForCausalLM with save_pretrained) or use a .gguf file"
    ), line
