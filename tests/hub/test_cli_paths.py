"""Hugging Face repo ids on the command line (docs/hub.md): `convert ORG/NAME[@REV]`, `compare-weights`,
`parity` / `diagnose --drafter/--target ORG/NAME`, from a cache built on disk with
huggingface_hub's own layout and HF_HUB_OFFLINE=1 (nothing here reaches the network)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from dflash_gguf import __version__
from dflash_gguf.errors import HubError
from tests.convert.llamacpp_reference import gguf_summary
from tests.conftest import ROOT, RUNTIME
from tests.hub._cache import (
    DRAFTER, DRAFTER_GGUF, DRAFTER_SWA, REPO, TARGET, add_snapshot, offline_env,
)

pytest.importorskip("huggingface_hub", reason="huggingface_hub is not installed (the [hub] extra)")


def test_compare_weights_from_the_cache(cli, hf_cache):
    add_snapshot(hf_cache, REPO, DRAFTER)
    code, out, err = cli("compare-weights", REPO, DRAFTER_GGUF, "--no-progress")
    assert code == 0, err
    assert "25 tensors: 25 bit-identical" in out and out.strip().splitlines()[-1].startswith("compare-weights: PASS")


def test_a_revision_picks_its_snapshot(cli, hf_cache):
    add_snapshot(hf_cache, REPO, DRAFTER_SWA)                    # main: another drafter
    v1 = add_snapshot(hf_cache, REPO, DRAFTER, refs=("v1",))   # v1: the one drafter.gguf was made from
    assert cli("compare-weights", REPO, DRAFTER_GGUF)[0] == 20
    assert cli("compare-weights", f"{REPO}@main", DRAFTER_GGUF)[0] == 20
    for rev in ("v1", v1):
        code, _, err = cli("compare-weights", f"{REPO}@{rev}", DRAFTER_GGUF)
        assert code == 0, err


def test_not_cached_offline_is_one_line(cli, hf_cache):
    code, out, err = cli("compare-weights", "dflash-test/nope", DRAFTER_GGUF)
    assert code == HubError.exit_code == 9 and "Traceback" not in err
    assert err.strip().splitlines() == [
        f"error: compare-weights dflash-test/nope: no such local path, and dflash-test/nope is not in the Hugging "
        f"Face cache ({hf_cache}) and HF_HUB_OFFLINE is set; unset HF_HUB_OFFLINE, or download it first with "
        f"`hf download dflash-test/nope`"]
    assert out.strip().splitlines()[-1].startswith("compare-weights: ERROR (exit 9)")


def test_unknown_revision_is_one_line(cli, hf_cache):
    add_snapshot(hf_cache, REPO, DRAFTER)
    code, _, err = cli("compare-weights", f"{REPO}@v9", DRAFTER_GGUF)
    assert code == 9 and len(err.strip().splitlines()) == 1
    assert f"revision v9 of {REPO} is not in the Hugging Face cache" in err
    assert f"`hf download {REPO} --revision v9`" in err


def test_json_keeps_one_document_on_a_hub_error(cli, hf_cache):
    code, out, _ = cli("compare-weights", "dflash-test/nope", DRAFTER_GGUF, "--json")
    env = json.loads(out)
    assert code == env["exit_code"] == 9 and env["error"]["type"] == "HubError"
    assert env["payload"]["a"] == "dflash-test/nope"


def test_a_local_directory_named_like_the_repo_wins(cli, hf_cache, tmp_path, monkeypatch):
    add_snapshot(hf_cache, REPO, DRAFTER_SWA)   # the cached repo would fail the comparison
    monkeypatch.chdir(tmp_path)
    shutil.copytree(DRAFTER, tmp_path / REPO)
    code, out, err = cli("compare-weights", REPO, DRAFTER_GGUF)
    assert code == 0, err
    assert str(hf_cache) not in out  # the report names the local directory, not a snapshot


def test_local_paths_keep_their_messages(cli, hf_cache):
    code, _, err = cli("compare-weights", "no-such-dir", DRAFTER_GGUF)
    assert code == 5 and "HF_HUB_OFFLINE" not in err and "Hugging Face" not in err


def _run(hf_home, *args, cwd):
    env = offline_env(hf_home)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "dflash_gguf", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=300)


def test_a_fresh_process_reads_hf_home_and_hf_hub_offline(tmp_path):
    # No patching: huggingface_hub reads HF_HOME and HF_HUB_OFFLINE from the environment at import.
    home = tmp_path / "hf"
    add_snapshot(home / "hub", REPO, DRAFTER_SWA)
    add_snapshot(home / "hub", REPO, DRAFTER, refs=("v1",))
    r = _run(home, "compare-weights", f"{REPO}@v1", DRAFTER_GGUF, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1].startswith("compare-weights: PASS")
    r = _run(home, "compare-weights", "dflash-test/nope", DRAFTER_GGUF, cwd=tmp_path)
    assert r.returncode == 9 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        f"error: compare-weights dflash-test/nope: no such local path, and dflash-test/nope is not in the Hugging "
        f"Face cache ({home / 'hub'}) and HF_HUB_OFFLINE is set; unset HF_HUB_OFFLINE, or download it first with "
        f"`hf download dflash-test/nope`"]


def test_parity_drafter_and_target_from_the_cache(cli, hf_cache):
    pytest.importorskip("torch", reason="torch is not installed (the [torch] extra)")
    add_snapshot(hf_cache, REPO, DRAFTER)
    add_snapshot(hf_cache, "dflash-test/tiny-target", TARGET)
    code, out, err = cli("parity", "--target", "dflash-test/tiny-target", "--drafter", REPO, "--drafter-gguf",
                         DRAFTER_GGUF, "--prompt", "Hello", "--max-new-tokens", "4", "--device", "cpu", "--jobs", "1",
                         "--json")
    assert code == 0, err
    env = json.loads(out)
    assert env["exit_code"] == 0 and env["payload"]["lossless"] is True


@pytest.mark.parametrize("command", ["parity", "diagnose"])
@pytest.mark.parametrize("flag", ["--drafter", "--target"])
def test_parity_and_diagnose_not_cached_is_one_line(cli, hf_cache, command, flag):
    pytest.importorskip("torch", reason="torch is not installed (the [torch] extra)")
    args = {"--drafter": RUNTIME / "drafter", "--target": RUNTIME / "target", flag: "dflash-test/nope@v2"}
    code, _, err = cli(command, *(x for kv in args.items() for x in kv), "--prompt-ids", "1,2", "--device", "cpu")
    assert code == 9 and "Traceback" not in err
    assert err.strip().splitlines() == [
        f"error: {flag} dflash-test/nope@v2: no such local path, and dflash-test/nope@v2 is not in the Hugging Face "
        f"cache ({hf_cache}) and HF_HUB_OFFLINE is set; unset HF_HUB_OFFLINE, or download it first with "
        f"`hf download dflash-test/nope --revision v2`"]


def test_a_gguf_target_stays_a_path(cli, hf_cache):
    pytest.importorskip("torch", reason="torch is not installed (the [torch] extra)")
    code, _, err = cli("parity", "--target", "models/target.gguf", "--drafter", RUNTIME / "drafter",
                       "--prompt-ids", "1,2", "--device", "cpu")
    assert code == 2 and "HF_HUB_OFFLINE" not in err
    assert err.strip().splitlines() == ["error: --target models/target.gguf: not a Hugging Face dir or a GGUF file"]


def test_convert_from_repo_ids_writes_what_the_local_dirs_give(cli, hf_cache, tmp_path):
    """`convert ORG/NAME --target-dir ORG/TARGET`: the drafter's snapshot, and of the target only
    its config and tokenizer (no weights are fetched), give the local dirs' file, named as
    mainline's --remote names it (the repo id) and recording the repo and commit it came from."""
    commit = add_snapshot(hf_cache, REPO, DRAFTER)
    add_snapshot(hf_cache, "dflash-test/tiny-target", TARGET)
    local, hub = tmp_path / "local.gguf", tmp_path / "hub.gguf"
    shutil.copytree(DRAFTER, tmp_path / "tiny-drafter")
    code, _, err = cli("convert", tmp_path / "tiny-drafter", "--target-dir", TARGET, "-o", local)
    assert code == 0, err
    code, _, err = cli("convert", REPO, "--target-dir", "dflash-test/tiny-target", "-o", hub)
    assert code == 0, err
    ours, theirs = gguf_summary(hub), gguf_summary(local)
    assert ours.tensors == theirs.tensors
    assert [kv for kv in ours.kvs if not kv[0].startswith("general.")] == \
           [kv for kv in theirs.kvs if not kv[0].startswith("general.")]
    general = {k: v for k, _, v in ours.kvs if k.startswith("general.")}
    assert general["general.name"] == REPO  # mainline's --remote, over the directory name "Tiny Drafter"
    assert general["general.source.repo_url"] == f"https://huggingface.co/{REPO}"
    assert general["general.source.url"] == f"https://huggingface.co/{REPO}/tree/{commit}"
    assert {k for k in general} - {k for k, _, _ in theirs.kvs} == {"general.source.repo_url", "general.source.url"}
    code, _, err = cli("convert", "dflash-test/nope@v2", "-o", tmp_path / "x.gguf")
    assert code == 9 and len(err.strip().splitlines()) == 1 and "dflash-test/nope" in err
    assert not (tmp_path / "x.gguf").exists()


def test_a_converted_snapshot_names_its_source(cli, hf_cache, tmp_path, monkeypatch):
    """Two revisions of one repo: each file records its own commit, `inspect` shows it, and without
    -o the file is ORG-NAME-{ftype}.gguf in the working directory (mainline's --remote), never in the cache."""
    main = add_snapshot(hf_cache, REPO, DRAFTER_SWA)
    v1 = add_snapshot(hf_cache, REPO, DRAFTER, refs=("v1",))
    monkeypatch.chdir(tmp_path)
    for rev, commit in (("", main), ("@v1", v1)):
        out = tmp_path / f"{rev or 'main'}.gguf"
        code, _, err = cli("convert", f"{REPO}{rev}", "--target-gguf", RUNTIME / "target.gguf", "-o", out)
        assert code == 0, err
        code, text, _ = cli("inspect", out)
        assert code == 0 and (f"source https://huggingface.co/{REPO} at commit {commit}; written by dflash-gguf "
                              f"{__version__}") in text
        code, js, _ = cli("inspect", out, "--json")
        assert json.loads(js)["provenance"] == {
            "name": REPO, "source_repo_url": f"https://huggingface.co/{REPO}",
            "source_url": f"https://huggingface.co/{REPO}/tree/{commit}", "commit": commit, "converter": __version__}
    code, _, err = cli("convert", f"{REPO}@v1", "--target-gguf", RUNTIME / "target.gguf", "-t", "q8_0")
    assert code == 0, err
    assert (tmp_path / "dflash-test-tiny-drafter-q8_0.gguf").is_file()
    assert not list(hf_cache.rglob("*.gguf"))
    # --metadata states the source itself: it wins over the snapshot's
    meta = tmp_path / "meta.json"
    meta.write_text(json.dumps({"general.source.url": "https://example.org/paper"}))
    code, _, err = cli("convert", REPO, "--target-gguf", RUNTIME / "target.gguf", "-o", tmp_path / "m.gguf",
                       "--metadata", meta)
    assert code == 0, err
    general = {k: v for k, _, v in gguf_summary(tmp_path / "m.gguf").kvs}
    assert general["general.source.url"] == "https://example.org/paper"
    assert general["general.source.repo_url"] == f"https://huggingface.co/{REPO}"


def test_the_target_dir_fetches_no_weights():
    from dflash_gguf.hub import TARGET_CONFIG_FILES

    assert not any("safetensors" in p or p.endswith((".bin", ".pt", ".gguf")) for p in TARGET_CONFIG_FILES)


def test_a_deepseek_v4_repo_fetches_only_the_draft_shards(cli, hf_cache, tmp_path, monkeypatch):
    """`convert deepseek-ai/…-DSpark`: the draft is a few of a DeepSeek-V4 checkpoint's shards, so
    the download asks for the small files first, then only the shards the index lists mtp.* in
    (as mainline's --remote --dspark), never every *.safetensors (160 GB)."""
    pytest.importorskip("torch")
    import huggingface_hub

    from tests.conftest import TARGETS
    from tests.convert.dsv4_ckpt import write_dsv4_checkpoint

    d = write_dsv4_checkpoint(tmp_path / "ckpt")
    (d / "model-00001-of-00002.safetensors").unlink()  # the main model: not in the cache at all
    add_snapshot(hf_cache, "dflash-test/dsv4-dspark", d)
    asked = []
    real = huggingface_hub.snapshot_download

    def spy(*args, **kwargs):
        asked.append(list(kwargs.get("allow_patterns") or []))
        return real(*args, **kwargs)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", spy)
    out = tmp_path / "draft.gguf"
    code, _, err = cli("convert", "dflash-test/dsv4-dspark", "--target-gguf", TARGETS / "llama-tiny.gguf", "-o", out)
    assert code == 0, err
    assert len(asked) == 2 and not any(p.endswith(".safetensors") for p in asked[0])
    assert [p for p in asked[1] if p.endswith(".safetensors")] == ["model-00002-of-00002.safetensors"]
