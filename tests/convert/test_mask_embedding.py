"""``mask_embedding.pt`` contents that ``torch.load(weights_only=True)`` accepts but that are not
a mask embedding: both readers (convert's ``load_mask_embedding`` and the reference's
``read_mask_embedding``) refuse each with one WeightsError line naming the file and what was
expected, reading metadata only and never formatting what was loaded. The same payloads as whole
processes (bounded memory and time): tests/redteam/test_hostile_inputs.py."""
from __future__ import annotations

import shutil
import time

import pytest

from dflash_gguf.config import load_config
from dflash_gguf.errors import WeightsError
from tests.conftest import DRAFTERS
from tests.redteam.test_hostile_inputs import HIDDEN, MASK_ID, _payloads

torch = pytest.importorskip("torch")

CASES = ["laughs-as-file", "laughs-as-id", "laughs-as-embedding", "two-element-id", "meta-id", "meta", "sparse",
         "int-dtype", "complex", "wrong-shape", "huge-declared-shape", "nan", "inf", "wrong-id", "huge-id"]
# the reference also takes a bare vector and a one-entry dict, so a bare list is "not one embedding"
REFERENCE_NEEDLE = {"laughs-as-file": "expected one embedding of 64 values, got a list of 2 item(s)",
                    "laughs-as-embedding": "expected one embedding of 64 values, got a list of 2 item(s)",
                    "wrong-id": "for mask_token_id 7, but the config's is 500"}


@pytest.fixture
def drafter(tmp_path):
    d = tmp_path / "d"
    shutil.copytree(DRAFTERS / "qwen3-flat", d)
    return d


def _save(d, payload):
    torch.save(payload, d / "mask_embedding.pt")
    return load_config(d)


@pytest.mark.parametrize("case", CASES)
def test_convert_reader_refuses(drafter, case):
    from dflash_gguf.convert.mask_embedding import load_mask_embedding

    payload, needle = _payloads()[case]
    cfg = _save(drafter, payload)
    t0 = time.monotonic()
    with pytest.raises(WeightsError) as err:
        load_mask_embedding(drafter, cfg, "BF16")
    msg = str(err.value)
    assert needle in msg and str(drafter / "mask_embedding.pt") in msg and "\n" not in msg and len(msg) < 400, msg
    assert time.monotonic() - t0 < 5


@pytest.mark.parametrize("case", CASES)
def test_reference_reader_refuses(drafter, case):
    from dflash_gguf.reference.load import read_mask_embedding

    payload, needle = _payloads()[case]
    cfg = _save(drafter, payload)
    if case in ("wrong-shape", "huge-declared-shape"):  # the reference takes any shape of hidden_size values
        needle = "expected one embedding of 64 values, got a torch.float32 tensor of shape ["
    with pytest.raises(WeightsError) as err:
        read_mask_embedding(drafter, cfg)
    msg = str(err.value)
    assert REFERENCE_NEEDLE.get(case, needle) in msg and "\n" not in msg and len(msg) < 400, msg


def test_accepted_layouts(drafter):
    """What mainline's converter accepts stays accepted: any float dtype it can cast, a
    non-contiguous vector, an id as a one-element tensor or an integral float; the row is torch's
    cast of the stored values (no detour through float32)."""
    from dflash_gguf.convert.mask_embedding import load_mask_embedding
    from dflash_gguf.reference.load import read_mask_embedding

    vec = torch.randn(2 * HIDDEN, dtype=torch.float64)[::2]
    for mask_id in (MASK_ID, torch.tensor([MASK_ID]), torch.tensor(MASK_ID), float(MASK_ID)):
        cfg = _save(drafter, {"mask_token_id": mask_id, "embedding": vec})
        got = load_mask_embedding(drafter, cfg, "BF16")
        assert got.token_id == MASK_ID and got.row == vec.to(torch.bfloat16).contiguous().view(torch.uint8).numpy().tobytes()
        assert torch.equal(read_mask_embedding(drafter, cfg), vec.float())
    cfg = _save(drafter, torch.ones(1, HIDDEN))  # the reference also takes a bare (1, hidden) row
    assert torch.equal(read_mask_embedding(drafter, cfg), torch.ones(HIDDEN))
