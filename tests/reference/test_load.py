"""reference/load.py: checkpoint dirs → torch modules, through the validated safetensors reader."""
from __future__ import annotations

import json
import shutil
import time

import pytest

from dflash_gguf.errors import WeightsError
from tests.conftest import DRAFTERS

torch = pytest.importorskip("torch")

from dflash_gguf.reference import load_drafter  # noqa: E402


def test_depth_is_checked_before_the_module_is_built(tmp_path):
    # Found by the convert fuzz: a config claiming 60,000 layers over 2-layer weights made the
    # loader build 60,000 layers (minutes) before noticing the weights were missing.
    d = tmp_path / "d"
    shutil.copytree(DRAFTERS / "qwen3-flat", d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["num_hidden_layers"] = 60000
    (d / "config.json").write_text(json.dumps(cfg))
    t0 = time.perf_counter()
    with pytest.raises(WeightsError, match="the config says 60000 layers but the weights hold 2 "):
        load_drafter(d)
    assert time.perf_counter() - t0 < 10  # not a timing benchmark: a hang guard with a wide margin


def test_corrupt_safetensors_is_a_weights_error(tmp_path):
    d = tmp_path / "d"
    shutil.copytree(DRAFTERS / "qwen3-flat", d)
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[:-100])
    with pytest.raises(WeightsError):
        load_drafter(d)
