from dflash_gguf.config import load_target_config

from tests.conftest import TARGETS
from tests.config.helpers import write_cfg


def test_target_config_flattens_text_config(tmp_path):
    cfg = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
           "text_config": {"hidden_size": 128, "num_hidden_layers": 7, "vocab_size": 1000, "rope_theta": 1e6}}
    t = load_target_config(write_cfg(tmp_path, cfg))
    assert (t.hidden_size, t.num_hidden_layers, t.vocab_size) == (128, 7, 1000)
    q = load_target_config(TARGETS / "qwen3-tiny")
    assert q.num_hidden_layers == 5 and q.hidden_size == 64
