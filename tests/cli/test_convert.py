"""`convert` on the command line (cli/convert.py): the plan (--dry-run), the summary, the JSON
documents, and the refusals it makes before reading anything. Numbers are checked against the
written file as gguf-py's GGUFReader reads it and the drafter's own config.json."""
from __future__ import annotations

import json
import shutil
from collections import Counter

from gguf import GGUFReader

from tests.conftest import DRAFTERS, FIXTURES, TARGETS

DRAFTER = DRAFTERS / "gemma-style"
TARGET = TARGETS / "llama-tiny.gguf"  # a target GGUF: no tokenizer packages needed
CONFIG = json.loads((DRAFTER / "config.json").read_text())


def _convert(cli, *args):
    return cli("convert", DRAFTER, "--target-gguf", TARGET, *args)


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines()]


def test_the_summary_describes_the_written_file(cli, tmp_path):
    out = tmp_path / "d.gguf"
    code, so, se = _convert(cli, "-o", out)
    assert code == 0, se
    r = GGUFReader(out)
    types = Counter(t.tensor_type.name for t in r.tensors)
    n_kv = sum(not k.startswith("GGUF.") for k in r.fields)
    stored = list(r.fields["dflash.target_layers"].contents())
    zlab = CONFIG["dflash_config"]["target_layer_ids"]
    lines = _lines(so)
    assert lines[0] == f"wrote {out}  ({out.stat().st_size:,} bytes)"
    assert lines[1] == "  format        llama.cpp  (general.architecture = dflash)"
    assert lines[2] == f"  tensors       {len(r.tensors)}  ({', '.join(f'{n} {k}' for k, n in sorted(types.items()))})"
    assert lines[3] == f"  metadata      {n_kv} keys"
    assert stored == [t + 1 for t in zlab]
    assert lines[4] == f"  target layers z-lab {zlab} → file {stored}  (+1 applied: stored as layer-input ids)"
    assert lines[5].startswith("  rope theta    from ")


def test_a_format_that_stores_layer_output_ids_says_so(cli, tmp_path):
    out = tmp_path / "d.gguf"
    code, so, se = _convert(cli, "-o", out, "--format", "dflash-draft")
    assert code == 0, se
    zlab = CONFIG["dflash_config"]["target_layer_ids"]
    assert f"  target layers z-lab {zlab} → file {zlab}  (stored unchanged (layer-output ids))" in _lines(so)


def test_json_result_matches_the_file(cli, tmp_path):
    out = tmp_path / "d.gguf"
    code, so, se = _convert(cli, "-o", out, "--json", "--outtype", "f16")
    assert code == 0, se
    doc = json.loads(so)  # stdout is the document alone
    r = GGUFReader(out)
    assert doc["output"] == {"path": str(out), "file_size": out.stat().st_size, "n_tensors": len(r.tensors),
                             "n_kv": sum(not k.startswith("GGUF.") for k in r.fields)}
    assert "target_checks" in doc
    assert {t.tensor_type.name for t in r.tensors} == {"F16", "F32"}


def test_dry_run_plans_without_writing(cli, tmp_path):
    out = tmp_path / "d.gguf"
    code, so, se = _convert(cli, "-o", out, "--dry-run")
    assert code == 0, se
    assert not out.exists()
    assert _lines(so)[0] == "plan: format llama.cpp, architecture dflash, outtype auto"
    # the table title counts what a real run writes
    code, _, se = _convert(cli, "-o", out)
    assert code == 0, se
    r = GGUFReader(out)
    assert f"tensors ({len(r.tensors)}, {sum(int(t.n_bytes) for t in r.tensors):,} bytes)" in so
    code, so, _ = _convert(cli, "--dry-run", "--json")
    doc = json.loads(so)
    assert code == 0 and "target_checks" in doc and "output" not in doc


def test_refusals(cli, tmp_path):
    d = tmp_path / "gemma-style"
    shutil.copytree(DRAFTER, d)
    code, so, se = cli("convert", d, "--target-gguf", TARGET)  # no -o: mainline's default name, beside the weights
    assert code == 0 and [p.name for p in d.glob("*.gguf")] == ["Gemma-Style-82K-BF16.gguf"], se
    out = tmp_path / "d.gguf"
    out.write_bytes(b"keep me")
    code, _, se = cli("convert", DRAFTER, "--target-gguf", tmp_path / "no-such-target.gguf", "-o", out)
    assert code == 5 and se.strip() == f"error: -o {out}: already exists; pass --force to overwrite it"
    assert out.read_bytes() == b"keep me"  # refused before the (missing) target was read
    code, _, se = _convert(cli, "-o", out, "--force")
    assert code == 0, se
    assert out.read_bytes()[:4] == b"GGUF"
    code, _, se = _convert(cli, "-o", tmp_path / "x.gguf", "--outtype", "q3_k")
    assert code == 2 and "q3_k" in se and len(se.strip().splitlines()) == 1


def test_a_gguf_given_as_the_checkpoint_is_named_as_one(cli):
    gguf = FIXTURES / "runtime" / "drafter.gguf"
    code, _, se = cli("convert", gguf, "-o", "never-written.gguf")
    assert code == 2 and se.strip().splitlines() == [
        f"error: {gguf}: a GGUF file, already converted; convert takes the drafter checkpoint directory "
        "(config.json + safetensors). To change a GGUF's format use 'dflash-gguf retarget', its type "
        "'dflash-gguf quantize'"]
