"""`retarget` on the command line (cli/retarget.py): the renames it prints, the JSON document,
--dry-run, and the output refusals. The written file is read back with gguf-py's GGUFReader:
the tensors are the source's under their new names, byte for byte."""
from __future__ import annotations

import json

import numpy as np
import pytest
from gguf import GGUFReader

from tests.conftest import DRAFTERS, FIXTURES, TARGETS

DRAFTER = DRAFTERS / "gemma-style"
TARGET = TARGETS / "llama-tiny.gguf"


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    from dflash_gguf.convert import convert

    out = tmp_path_factory.mktemp("retarget") / "src.gguf"
    convert(DRAFTER, out, format="llama.cpp", target_gguf=TARGET)
    return out


def _data(path) -> dict[str, bytes]:
    return {t.name: np.asarray(t.data).tobytes() for t in GGUFReader(path).tensors}


def test_renames_are_printed_and_the_bytes_kept(cli, src, tmp_path):
    out = tmp_path / "r.gguf"
    code, so, se = cli("retarget", src, "--format", "dflash-draft", "-o", out)
    assert code == 0, se
    code, js, _ = cli("retarget", src, "--format", "dflash-draft", "--json", "--dry-run")
    pairs = [(t["from"], t["to"]) for t in json.loads(js)["tensors"]]
    before, after = _data(src), _data(out)
    assert sorted(a for a, _ in pairs) == sorted(before) and sorted(b for _, b in pairs) == sorted(after)
    assert all(before[a] == after[b] for a, b in pairs)
    changed = [(a, b) for a, b in pairs if a != b]
    assert changed and ("fc.weight", "dflash_fc.weight") in changed
    assert so.splitlines() == [
        f"{src.name}: llama.cpp → dflash-draft (architecture dflash-draft)",
        *[f"  {a} → {b}" for a, b in changed],
        f"  {len(pairs)} tensors, {len(changed)} renamed, bytes unchanged",
        f"wrote {out} ({out.stat().st_size:,} bytes)",
    ]
    assert GGUFReader(out).fields["general.architecture"].contents() == "dflash-draft"


def test_json_and_dry_run(cli, src, tmp_path):
    out = tmp_path / "r.gguf"
    code, so, se = cli("retarget", src, "--format", "lucebox", "-o", out, "--json", "--dry-run")
    assert code == 0, se
    doc = json.loads(so)
    assert not out.exists() and doc["output"] is None
    assert (doc["source_format"], doc["format"]) == ("llama.cpp", "lucebox")
    code, so, se = cli("retarget", src, "--format", "lucebox", "-o", out, "--json")
    assert code == 0, se
    doc = json.loads(so)
    assert doc["output"] == str(out) and doc["architecture"] == GGUFReader(out).fields["general.architecture"].contents()


def test_the_same_format_renames_nothing(cli, src, tmp_path):
    code, so, se = cli("retarget", src, "--format", "llama.cpp", "--dry-run")
    assert code == 0, se
    n = len(GGUFReader(src).tensors)
    assert so.splitlines() == [f"{src.name}: llama.cpp → llama.cpp (architecture dflash)",
                               f"  {n} tensors, 0 renamed, bytes unchanged"]


def test_refusals(cli, src, tmp_path):
    out = tmp_path / "r.gguf"
    out.write_bytes(b"keep")
    code, _, se = cli("retarget", src, "--format", "dflash-draft", "-o", out)
    assert code == 5 and "already exists; pass --force" in se and out.read_bytes() == b"keep"
    code, _, se = cli("retarget", src, "--format", "dflash-draft", "-o", out, "--force")
    assert code == 0, se
    code, _, se = cli("retarget", tmp_path / "nope.gguf", "--format", "llama.cpp", "--dry-run")
    assert code == 5 and "nope.gguf" in se
    code, _, se = cli("retarget", src, "--format", "vllm", "--dry-run")
    assert code == 2 and "vllm" in se


@pytest.fixture(scope="module")
def legacy(tmp_path_factory):
    """A legacy DSpark GGUF (tests/formats/legacy_dspark_files.py) and our mainline conversion of its checkpoint."""
    from tests.formats.legacy_dspark_files import mainline_drafter, to_legacy

    root = tmp_path_factory.mktemp("legacy-dspark-cli")
    mainline = mainline_drafter(root)
    return to_legacy(mainline, root / "old-dspark.gguf"), mainline


def test_a_legacy_dspark_file_is_migrated(cli, legacy, tmp_path):
    old, mainline = legacy
    out = tmp_path / "new.gguf"
    code, so, se = cli("retarget", old, "--target-gguf", TARGET, "-o", out, "--drop-shared-tensors")
    assert code == 0, se
    assert so.splitlines()[0] == "old-dspark.gguf: legacy-dspark → llama.cpp (architecture dflash)"
    assert "  dspark.markov_head_a.weight → markov_w1.weight" in so.splitlines()
    assert "  dropped (the target lends them): token_embd.weight, output.weight" in so.splitlines()
    assert out.read_bytes() == mainline.read_bytes()
    code, js, se = cli("retarget", old, "--target-gguf", TARGET, "--json", "--dry-run")
    doc = json.loads(js)
    assert code == 0 and doc["source_format"] == "legacy-dspark" and doc["dropped"] == []
    assert {"from": "dspark.hidden_norm.weight", "to": "enc.output_norm.weight"} in doc["tensors"]


def test_a_legacy_dspark_file_is_refused_in_one_line_without_a_donor(cli, legacy, tmp_path):
    old, _ = legacy
    code, so, se = cli("retarget", old, "-o", tmp_path / "x.gguf")
    assert code == 2 and "pass --target-gguf DONOR.gguf" in se and len(se.strip().splitlines()) == 1
    code, _, se = cli("retarget", old, "--target-gguf", FIXTURES / "guards" / "qwen3-8b.gguf", "-o", tmp_path / "x.gguf")
    assert code == 7 and "drafter vocab 512 != target vocab 32" in se and len(se.strip().splitlines()) == 1
    assert not (tmp_path / "x.gguf").exists()


def test_inspect_names_the_migration(cli, legacy):
    old, _ = legacy
    code, so, se = cli("inspect", old)
    assert code == 0, se
    lines = so.splitlines()
    assert lines[0] == f"{old}: architecture dspark, format legacy DSpark GGUF (fork format)"
    assert lines[1] == ("  mainline llama.cpp cannot load it; migrate: dflash-gguf retarget old-dspark.gguf "
                        "--target-gguf DONOR.gguf -o OUT.gguf [--drop-shared-tensors]")
