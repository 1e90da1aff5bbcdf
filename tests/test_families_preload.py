"""Before any model loads: a family no method can be installed in, or a config of a family that a method
cannot run exactly, is refused in one line naming what to do; ``rope`` (nothing installed) runs anywhere."""

import pytest
from transformers import AutoConfig

from lampe_eval.backends.hf import HFBackend
from lampe_eval.errors import UnsupportedModelError

from .helpers.cli import cli, one_line


def saved_config(tmp_path, model_type: str, **fields) -> str:
    config = AutoConfig.for_model(model_type, **fields)
    config.architectures = [f"{type(config).__name__.removesuffix('Config')}ForCausalLM"]
    config.save_pretrained(tmp_path)
    return str(tmp_path)


def test_an_unknown_family_is_refused_for_a_method_and_runs_rope(tmp_path):
    model = saved_config(tmp_path, "gptj")  # GPT-J turns interleaved pairs: no family here
    with pytest.raises(UnsupportedModelError, match="'gptj' models .*only --method rope") as refused:
        HFBackend.check_model(model, ["rope", "lampe"])
    assert "\n" not in str(refused.value)
    HFBackend.check_model(model, ["rope"])


def test_a_config_the_family_cannot_run_exactly_is_refused(tmp_path):
    rope = {
        "rope_type": "longrope",
        "rope_theta": 10000.0,
        "short_factor": [1.0] * 48,
        "long_factor": [2.0] * 48,
    }
    model = saved_config(tmp_path, "phi3", rope_parameters={**rope, "original_max_position_embeddings": 4096})
    with pytest.raises(UnsupportedModelError, match="'longrope' RoPE scaling") as refused:
        HFBackend.check_model(model, ["selfextend"])
    assert "\n" not in str(refused.value)


def test_a_partial_rotary_config_passes(tmp_path):  # Phi-4-mini: three quarters of each head turn
    HFBackend.check_model(saved_config(tmp_path / "phi", "phi3", partial_rotary_factor=0.75), ["selfextend"])
    HFBackend.check_model(saved_config(tmp_path / "stablelm", "stablelm"), ["lampe"])
    HFBackend.check_model(saved_config(tmp_path / "phi2", "phi"), ["lampe"])  # Phi-2: 0.4 of each head
    HFBackend.check_model(saved_config(tmp_path / "neox", "gpt_neox"), ["dca"])  # Pythia: a quarter


def test_a_supported_family_passes(tmp_path):
    HFBackend.check_model(saved_config(tmp_path, "qwen3"), ["lampe", "dca"])


@pytest.mark.parametrize("model_type", ["olmo2", "phi", "gpt_neox"])
def test_models_vllm_runs_through_its_transformers_backend_take_a_method(tmp_path, model_type):
    """vLLM 0.32 runs OLMo 2, Phi and GPT-NeoX with transformers' modules: a method goes in there too."""
    pytest.importorskip("vllm")
    from lampe_eval.backends.vllm import VLLMBackend

    model = saved_config(tmp_path, model_type)
    VLLMBackend.check_model(model, ["lampe", "dca"])
    HFBackend.check_model(model, ["lampe", "dca"])


@pytest.mark.usefixtures("no_model")
def test_run_refuses_before_loading(tmp_path, capsys):
    model = saved_config(tmp_path / "gptj", "gptj")
    args = ["--model", model, "--bench", "pg19", "--len", "1k", "--method", "lampe", "--dry-run"]
    code, _, err = cli(capsys, "run", "--out", str(tmp_path / "R"), *args)
    assert code == 2 and "only --method rope runs on it" in one_line(err), err


def test_gemma2_takes_a_method_on_both_backends(tmp_path):
    """Soft-capped logits: the HF backend's portable path, vLLM's paged attention; local layers alone."""
    model = saved_config(tmp_path, "gemma2")
    HFBackend.check_model(model, ["lampe"])
    pytest.importorskip("vllm")
    from lampe_eval.backends.vllm import VLLMBackend

    VLLMBackend.check_model(model, ["lampe"])


def test_gemma3_text_and_multimodal_configs_take_a_method_on_both_backends(tmp_path):
    """Both backends change Gemma 3's global layers alone; a multimodal checkpoint's config
    (``Gemma3ForConditionalGeneration``) is read through its text model's."""
    text = saved_config(tmp_path / "text", "gemma3_text")
    multimodal = AutoConfig.for_model("gemma3")
    multimodal.architectures = ["Gemma3ForConditionalGeneration"]
    multimodal.save_pretrained(tmp_path / "multimodal")
    for model in (text, str(tmp_path / "multimodal")):
        HFBackend.check_model(model, ["lampe"])
    pytest.importorskip("vllm")
    from lampe_eval.backends.vllm import VLLMBackend

    for model in (text, str(tmp_path / "multimodal")):
        VLLMBackend.check_model(model, ["lampe"])


def test_sliding_window_layers_beside_full_ones_run_on_the_hf_backend(tmp_path):
    """Qwen2 with use_sliding_window: its full layers get the method, its sliding ones keep their own
    attention (HF); vLLM 0.32 runs no such model (its Qwen2Model asserts), rope included: one line before
    loading; a model whose every layer slides is refused."""
    fields = {"use_sliding_window": True, "sliding_window": 16, "max_window_layers": 1}
    model = saved_config(tmp_path / "qwen2", "qwen2", num_hidden_layers=3, **fields)
    HFBackend.check_model(model, ["lampe"])
    every = saved_config(tmp_path / "mistral", "mistral", sliding_window=4096)
    with pytest.raises(UnsupportedModelError, match="every layer is a sliding-window layer") as refused:
        HFBackend.check_model(every, ["lampe"])
    assert "\n" not in str(refused.value)
    pytest.importorskip("vllm")
    from lampe_eval.backends.vllm import VLLMBackend

    for methods in (["lampe"], ["rope"]):
        with pytest.raises(
            UnsupportedModelError, match="sliding-window layers beside full ones.*--backend hf"
        ):
            VLLMBackend.check_model(model, methods)
