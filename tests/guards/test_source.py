"""`check --source` (guards/source.py): drafter GGUFs our convert wrote from the fixture
checkpoints, against the checkpoint they came from (a match, in every format) and against edited
copies of it: re-published with more layers and taps, another RoPE theta (flat and under
rope_parameters), fewer layers; and the inputs it refuses."""
from __future__ import annotations

import json
import shutil

import pytest

from dflash_gguf.cli.checks import report_exit_code
from dflash_gguf.errors import EXIT_FINDINGS, ConfigError, InputError
from dflash_gguf.fileio.gguf_header import read_header
from dflash_gguf.guards.run import run_checks
from dflash_gguf.guards.source import resolve_source
from tests.conftest import DRAFTERS, FIXTURES, TARGETS, optional_packages

from .conftest import FORMATS

GEMMA = DRAFTERS / "gemma-style"  # converted against a target GGUF: no tokenizer package needed
NESTED = DRAFTERS / "qwen3-nested"  # its theta is under rope_parameters
TARGET = {GEMMA: {"target_gguf": TARGETS / "llama-tiny.gguf"}, NESTED: {"target_dir": TARGETS / "qwen3-tiny"}}
FIX = "the upstream checkpoint changed; reconvert"


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """(checkpoint dir, format) -> a GGUF our convert wrote from it (once per module)."""
    from dflash_gguf.convert import convert

    root = tmp_path_factory.mktemp("source")
    cache = {}

    def get(d=GEMMA, fmt="llama.cpp"):
        if (d, fmt) not in cache:
            out = root / f"{d.name}-{fmt}.gguf"
            with optional_packages():  # qwen3-tiny's tokenizer.json needs the [tokenizers] extra
                convert(d, out, format=fmt, **({} if fmt == "lucebox" else TARGET[d]))
            cache[d, fmt] = out
        return cache[d, fmt]

    return get


def edited(tmp_path, src, edit):
    """A copy of the checkpoint ``src`` whose config.json went through ``edit(dict)``."""
    d = tmp_path / f"{src.name}-edited"
    shutil.copytree(src, d)
    cfg = json.loads((d / "config.json").read_text())
    edit(cfg)
    (d / "config.json").write_text(json.dumps(cfg, indent=2))
    return d


def source_findings(r):
    return [f for f in r.findings if f.category == "source"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_checkpoint_it_was_converted_from_matches(converted, fmt):
    path = converted(GEMMA, fmt)
    r = run_checks(path, source=resolve_source(GEMMA))
    n_tensors = len(read_header(path).tensors)
    assert source_findings(r) == [] and report_exit_code(r) == 0
    assert r.source.matches and r.source.problem is None
    assert len(r.source.tensors) == n_tensors and all(t.status == "same" for t in r.source.tensors)
    assert r.source.constants and all(c.passed for c in r.source.constants)
    assert r.source.summary == f"matches {GEMMA}'s config.json ({len(r.source.constants)} constants, {n_tensors} tensors)"
    doc = r.source.to_json()
    assert doc["matches"] is True and doc["summary"] == r.source.summary and doc["source"]["path"] == str(GEMMA)


def republished(cfg):
    """Two layers and two taps more, as a drafter retrained under the same name."""
    n = cfg["num_hidden_layers"]
    cfg["num_hidden_layers"] = n + 2
    if "layer_types" in cfg:
        cfg["layer_types"] = cfg["layer_types"] + cfg["layer_types"][:2]
    taps = cfg["dflash_config"]["target_layer_ids"]
    cfg["dflash_config"]["target_layer_ids"] = [*taps, taps[-1] + 1, taps[-1] + 2]
    cfg["num_target_layers"] = taps[-1] + 3


@pytest.mark.parametrize("fmt", ["llama.cpp", "dflash-draft"])  # taps stored +1 and as they are
def test_a_republished_checkpoint_with_more_layers_and_taps_is_caught(converted, tmp_path, fmt):
    path = converted(GEMMA, fmt)
    src = edited(tmp_path, GEMMA, republished)
    base, new = (json.loads((d / "config.json").read_text()) for d in (GEMMA, src))
    n, taps = base["num_hidden_layers"], base["dflash_config"]["target_layer_ids"]
    new_taps = new["dflash_config"]["target_layer_ids"]
    r = run_checks(path, source=resolve_source(src))
    found = {f.code: [] for f in source_findings(r)}
    for f in source_findings(r):
        found[f.code].append(f)
    assert report_exit_code(r) == EXIT_FINDINGS and not r.source.matches
    arch = read_header(path).arch
    (layers,) = found["source-layers"]
    assert layers.message == (f"block count: the file has {n} layers, {src}'s config.json has {n + 2} "
                              f"(num_hidden_layers) — {FIX}")
    assert layers.where == f"key {arch}.block_count" and layers.severity.value == "error"
    taps_f = [f for f in found["source-taps"] if "target layers" in f.message]
    assert [f.message for f in taps_f] == [(
        f"taps: the file has {len(taps)} target layers {taps}, {src}'s config.json has {len(new_taps)} {new_taps} "
        f"(dflash_config.target_layer_ids; z-lab ids) — {FIX}")]
    # the two new layers, each one finding naming it; every tensor of them missing in the JSON
    per_layer = [t.split(".", 2)[2] for t in (x.name for x in r.source.tensors) if t.startswith("blk.0.")]
    assert [f.where for f in found["source-tensor-missing"]] == [f"tensor blk.{n}.*", f"tensor blk.{n + 1}.*"]
    assert found["source-tensor-missing"][0].message.startswith(
        f"layer blk.{n}: not in the file; {src}'s config.json implies its {len(per_layer)} tensors (")
    missing = {t.name for t in r.source.tensors if t.status == "missing"}
    assert missing == {f"blk.{i}.{s}" for i in (n, n + 1) for s in per_layer}
    # fc grows with the taps: its input width is taps × the target's hidden size
    (fc,) = found["source-tensor-shape"]
    width, hidden = read_header(path).tensors_by_name[fc.where.removeprefix("tensor ")].shape_ne
    th = width // len(taps)
    assert fc.message == (f"tensor {fc.where.removeprefix('tensor ')}: the file has ne [{width}, {hidden}], {src}'s "
                          f"config.json implies ne [{th * len(new_taps)}, {hidden}] ({len(new_taps)} taps × target "
                          f"hidden {th}) — {FIX}")
    # the JSON holds every key and tensor, passing or not
    doc = r.source.to_json()
    keys = {c["key"]: c for c in doc["constants"]}
    assert keys[f"{arch}.block_count"]["ours"] == n + 2 and keys[f"{arch}.block_count"]["theirs"] == n
    assert {t["name"] for t in doc["tensors"]} >= {t.name for t in read_header(path).tensors}


def test_fewer_layers_in_the_source_leave_extra_layers(converted, tmp_path):
    path = converted(GEMMA)
    src = edited(tmp_path, GEMMA, lambda c: c.update(num_hidden_layers=1, layer_types=c["layer_types"][:1]))
    r = run_checks(path, source=resolve_source(src))
    extra = [f for f in source_findings(r) if f.code == "source-tensor-extra"]
    assert [(f.where, f.message.split(" — ")[0]) for f in extra] == [
        ("tensor blk.1.*", f"layer blk.1: in the file (11 tensors), but {src}'s config.json implies 1 layers")]


def test_a_changed_rope_theta_is_a_constant_finding(converted, tmp_path):
    path = converted(GEMMA)
    src = edited(tmp_path, GEMMA, lambda c: c.update(rope_theta=500000.0))
    r = run_checks(path, source=resolve_source(src))
    (f,) = source_findings(r)
    arch = read_header(path).arch
    assert (f.code, f.where) == ("source-constant", f"key {arch}.rope.freq_base")
    assert f.message == (f"{arch}.rope.freq_base: the file has 1000000, {src}'s config.json gives 500000 "
                         f"(rope_theta) — {FIX}")
    assert all(t.status == "same" for t in r.source.tensors)


def test_a_changed_rope_theta_under_rope_parameters(converted, tmp_path):
    path = converted(NESTED)
    src = edited(tmp_path, NESTED, lambda c: c["rope_parameters"].update(rope_theta=20000000))
    r = run_checks(path, source=resolve_source(src))
    (f,) = source_findings(r)
    arch = read_header(path).arch
    assert f.message == (f"{arch}.rope.freq_base: the file has 10000000, {src}'s config.json gives 20000000 "
                         f"(rope_parameters.rope_theta) — {FIX}")
    assert report_exit_code(r) == EXIT_FINDINGS


def test_a_dspark_drafter_matches_its_checkpoint_and_a_reduced_vocabulary_is_caught(dspark):
    for case in ("draft", "qwen3-reduced", "gemma4"):
        r = run_checks(dspark["gguf"][case], source=resolve_source(dspark["dirs"][case]))
        assert r.source.matches, (case, [f.message for f in source_findings(r)])
    # the full-vocabulary drafter against the reduced one's config.json: its head and d2t are missing
    r = run_checks(dspark["gguf"]["draft"], source=resolve_source(dspark["dirs"]["qwen3-reduced"]))
    assert {(f.code, f.where) for f in source_findings(r)} == {
        ("source-tensor-missing", "tensor output.weight"), ("source-tensor-missing", "tensor d2t"),
        ("source-tensor-shape", "tensor markov_w2.weight")}


def test_a_config_convert_refuses_is_one_finding(converted, tmp_path):
    path = converted(GEMMA)
    src = edited(tmp_path, GEMMA, lambda c: c.pop("max_position_embeddings"))
    r = run_checks(path, source=resolve_source(src))
    (f,) = source_findings(r)
    assert f.code == "source-config" and report_exit_code(r) == EXIT_FINDINGS
    assert f.message.startswith(f"convert cannot make a llama.cpp file from {src}'s config.json: "
                                "max_position_embeddings is missing; --format llama.cpp needs it")
    assert not r.source.matches and r.source.problem.startswith("convert refuses it: max_position_embeddings")


def test_a_file_that_is_not_a_drafter_is_one_finding(tmp_path):
    path = FIXTURES / "guards" / "qwen3-8b.gguf"
    r = run_checks(path, source=resolve_source(GEMMA))
    (f,) = source_findings(r)
    assert f.code == "source-not-drafter" and report_exit_code(r) == EXIT_FINDINGS
    assert f.message == (f"architecture 'qwen3' is not a DFlash drafter; --source compares a drafter GGUF with the "
                         f"config.json of the checkpoint it was converted from ({GEMMA})")
    assert not r.source.matches and r.source.tensors == ()


def test_sources_it_refuses(tmp_path):
    no_config = tmp_path / "no-config"
    shutil.copytree(GEMMA, no_config)
    (no_config / "config.json").unlink()
    with pytest.raises(ConfigError) as e:
        resolve_source(no_config)
    assert e.value.exit_code == 3 and "\n" not in str(e.value)
    assert str(e.value).startswith(f"--source {no_config}: {no_config / 'config.json'}: not found; ")
    with pytest.raises(ConfigError, match=r"is not a DFlash drafter") as e:
        resolve_source(TARGETS / "qwen3-tiny")  # a target's config.json
    assert "\n" not in str(e.value)
    with pytest.raises(InputError) as e:
        resolve_source(tmp_path / "nope")
    assert e.value.exit_code == 5 and str(e.value).startswith(f"--source {tmp_path / 'nope'}: no such directory")


def test_the_source_cli_errors_are_one_line(cli, converted, tmp_path):
    path = converted(GEMMA)
    no_config = tmp_path / "empty"
    no_config.mkdir()
    for src, code in ((no_config, 3), (TARGETS / "qwen3-tiny", 3), (tmp_path / "nope", 5)):
        rc, out, err = cli("check", path, "--source", src)
        assert rc == code and "Traceback" not in err
        (line,) = err.strip().splitlines()
        assert line.startswith(f"error: --source {src}: ")
        assert out.strip().splitlines() == [out.strip()] and out.startswith(f"check: ERROR (exit {code}): ")


def test_a_deepseek_v4_checkpoint_is_sent_to_compare_weights(tmp_path):
    """A DeepSeek-V4 checkpoint's draft is sized by its weights' index, not its config.json alone:
    --source says so in one line and names the command that compares the file with it."""
    d = tmp_path / "dsv4"
    d.mkdir()
    shutil.copyfile(FIXTURES / "published" / "deepseek-v4-flash-dspark" / "config.json", d / "config.json")
    with pytest.raises(ConfigError) as exc:
        resolve_source(d)
    msg = str(exc.value)
    assert "DeepSeek-V4" in msg and f"compare-weights {d}" in msg and "\n" not in msg
