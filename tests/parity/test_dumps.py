"""--dump / --against: the golden-activation layout and its comparison."""
import json

import pytest

pytest.importorskip("torch")

from tests.parity.conftest import parity  # noqa: E402


def test_dump_against_round_trip(cli, tmp_path):
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    assert parity(cli, tmp_path, "--dump", d1)[0] == 0
    code, rep, so, se = parity(cli, tmp_path, "--dump", d2, "--against", d1)
    assert code == 0, se
    a = rep["against"]
    assert a["identical"] is True and a["tensors_compared"] > 0
    index = json.loads((d1 / "index.json").read_text())
    assert index["version"] == 1 and index["entries"][0]["steps"]
    step = index["entries"][0]["steps"][0]
    from safetensors.numpy import load_file

    t = load_file(str(d1 / step["file"]))
    assert {"context", "block_ids", "positions", "draft_logits"} <= set(t)
    assert t["block_ids"].tolist()[0] == rep["prompt_ids"][-1] or step["start"] > len(rep["prompt_ids"])
    # a perturbed dump is detected
    t["draft_logits"][0, 0] += 1.0
    from safetensors.numpy import save_file

    save_file(t, str(d1 / step["file"]))
    code, rep, _, _ = parity(cli, tmp_path, "--dump", tmp_path / "d3", "--against", d1)
    assert rep["against"]["identical"] is False and rep["against"]["max_abs_by_tensor"]["draft_logits"] > 0.99
