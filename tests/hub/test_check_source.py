"""`check FILE --source ORG/NAME[@REV]` (guards/source.py) from a Hugging Face cache built on disk
with huggingface_hub's own layout and HF_HUB_OFFLINE=1: the revision the file was converted from
passes, a retrained one under the same name (two layers and two taps more) is caught, only
config.json is fetched, and the repo is resolved once for any number of files."""
from __future__ import annotations

import json
import shutil

import pytest

from dflash_gguf.errors import EXIT_FINDINGS, HubError
from dflash_gguf.fileio.gguf_header import read_header
from tests.hub._cache import DRAFTER, DRAFTER_GGUF, REPO, add_snapshot

pytest.importorskip("huggingface_hub", reason="huggingface_hub is not installed (the [hub] extra)")

from tests.guards.test_source import republished  # noqa: E402

FIX = "the upstream checkpoint changed; reconvert"


@pytest.fixture
def retrained(tmp_path):
    """DRAFTER re-published under the same name: config.json alone (check reads nothing else), with
    num_hidden_layers + 2 and two more target layers."""
    cfg = json.loads((DRAFTER / "config.json").read_text())
    republished(cfg)
    d = tmp_path / "retrained"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg, indent=2))
    return d, cfg


def test_the_converted_revision_passes_and_the_retrained_one_is_caught(cli, hf_cache, retrained):
    d, cfg = retrained
    v1 = add_snapshot(hf_cache, REPO, DRAFTER, refs=("v1",))
    add_snapshot(hf_cache, REPO, d, refs=("main", "v2"))
    base = json.loads((DRAFTER / "config.json").read_text())
    n, taps = base["num_hidden_layers"], base["dflash_config"]["target_layer_ids"]

    n_tensors = len(read_header(DRAFTER_GGUF).tensors)
    for rev in ("v1", v1):
        code, out, err = cli("check", DRAFTER_GGUF, "--source", f"{REPO}@{rev}")
        assert code == 0, err
        source_line = out.splitlines()[1]
        assert source_line.startswith(f"  source   matches {REPO}@{rev}'s config.json (")
        assert source_line.endswith(f" constants, {n_tensors} tensors)")

    for arg, label in ((f"{REPO}@v2", f"{REPO}@v2"), (REPO, None)):
        code, out, err = cli("check", DRAFTER_GGUF, "--source", arg)
        assert code == EXIT_FINDINGS == 12 and err == ""
        label = label or f"{REPO}@{_commit(hf_cache, 'main')[:8]}"  # no revision: named by the commit
        lines = out.splitlines()
        assert f"  error    source-layers: block count: the file has {n} layers, {label}'s config.json has " \
               f"{cfg['num_hidden_layers']} (num_hidden_layers) — {FIX}  [key dflash.block_count]" in lines
        assert f"  error    source-taps: taps: the file has {len(taps)} target layers {taps}, {label}'s config.json " \
               f"has {len(taps) + 2} {cfg['dflash_config']['target_layer_ids']} (dflash_config.target_layer_ids; " \
               f"z-lab ids) — {FIX}  [key dflash.target_layers]" in lines
        for i in (n, n + 1):
            assert any(line.startswith(f"  error    source-tensor-missing: layer blk.{i}: not in the file; {label}'s "
                                       "config.json implies its 11 tensors (") for line in lines)
        assert lines[-1].startswith("check: FAIL (exit 12): 1 file, ")


def test_json_names_the_repo_revision_and_commit(cli, hf_cache, retrained):
    d, _ = retrained
    add_snapshot(hf_cache, REPO, DRAFTER, refs=("v1",))
    v2 = add_snapshot(hf_cache, REPO, d, refs=("v2",))
    code, out, _ = cli("check", DRAFTER_GGUF, "--source", f"{REPO}@v2", "--json")
    env = json.loads(out)
    src = env["payload"]["source"]
    assert code == env["exit_code"] == 12
    assert (src["arg"], src["repo"], src["revision"], src["commit"]) == (f"{REPO}@v2", REPO, "v2", v2)
    assert src["path"] == str(hf_cache / f"models--{REPO.replace('/', '--')}" / "snapshots" / v2)
    (doc,) = env["payload"]["files"]
    assert doc["source"]["matches"] is False and doc["source"]["source"] == src
    missing = {t["name"] for t in doc["source"]["tensors"] if t["status"] == "missing"}
    assert {"blk.2.attn_q.weight", "blk.3.ffn_down.weight"} <= missing
    assert {f["rule_id"] for f in env["findings"]} >= {"source-layers", "source-taps", "source-tensor-missing",
                                                        "source-tensor-shape"}


def test_only_config_json_is_fetched_and_the_repo_is_resolved_once(cli, hf_cache, monkeypatch):
    import huggingface_hub

    from dflash_gguf.hub import DRAFTER_CONFIG_FILES

    assert DRAFTER_CONFIG_FILES == ("config.json",)
    add_snapshot(hf_cache, REPO, DRAFTER, refs=("v1",))
    calls = []
    real = huggingface_hub.snapshot_download

    def counting(*args, **kwargs):
        calls.append(kwargs.get("allow_patterns"))
        return real(*args, **kwargs)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", counting)
    code, out, err = cli("check", DRAFTER_GGUF, DRAFTER_GGUF, "--source", f"{REPO}@v1")
    assert code == 0, err
    assert calls == [["config.json"]]
    assert out.count(f"  source   matches {REPO}@v1's config.json") == 2


def test_a_revision_not_cached_is_one_line(cli, hf_cache):
    add_snapshot(hf_cache, REPO, DRAFTER, refs=("v1",))
    code, out, err = cli("check", DRAFTER_GGUF, "--source", f"{REPO}@v9")
    assert code == HubError.exit_code == 9 and "Traceback" not in err
    (line,) = err.strip().splitlines()
    assert line.startswith(f"error: --source {REPO}@v9: revision v9 of {REPO} is not in the Hugging Face cache")
    assert out.strip().splitlines()[-1].startswith("check: ERROR (exit 9)")


def test_a_local_directory_named_like_the_repo_wins(cli, hf_cache, retrained, tmp_path, monkeypatch):
    add_snapshot(hf_cache, REPO, retrained[0])  # the cached repo would fail the check
    monkeypatch.chdir(tmp_path)
    shutil.copytree(DRAFTER, tmp_path / REPO)
    code, out, err = cli("check", DRAFTER_GGUF, "--source", REPO)
    assert code == 0, err
    assert f"  source   matches {REPO}'s config.json (" in out


def _commit(cache, ref: str) -> str:
    return (cache / f"models--{REPO.replace('/', '--')}" / "refs" / ref).read_text()
