"""dflash_gguf/hub.py: which arguments are repo ids, and resolve_dir against a real (offline) cache."""
from __future__ import annotations

import builtins

import pytest

from dflash_gguf import hub
from dflash_gguf.errors import HubError, UsageError
from tests.hub._cache import DRAFTER, DRAFTER_SWA, REPO, TARGET, add_snapshot


@pytest.mark.parametrize("arg, parsed", [
    ("z-lab/Qwen3-8B-DFlash-b16", ("z-lab/Qwen3-8B-DFlash-b16", None)),
    ("z-lab/Qwen3-8B-DFlash-b16@main", ("z-lab/Qwen3-8B-DFlash-b16", "main")),
    ("org/name@refs/pr/3", ("org/name", "refs/pr/3")),
    ("Org_1/name.v2@" + "a" * 40, ("Org_1/name.v2", "a" * 40)),
    ("a/b", ("a/b", None)),
])
def test_repo_ids(arg, parsed):
    assert hub.parse_repo_id(arg) == parsed


@pytest.mark.parametrize("arg", [
    "name",                       # no namespace: any relative name
    "./org/name", "/org/name", "~/org/name", "../org/name", ".org/name",
    "org/name/sub",               # two slashes: a path
    "org/", "/name", "org/name@", "org/name@a@b", "org/name@a b",
    "-org/name", "org/name-", "org/.name", "org/name.",
    "org/na--me", "org/na..me",   # refused by the Hub
    "org/name.git", "models/drafter-q8_0.gguf",  # a missing GGUF keeps its own "not found"
    "org/na me", "org\\name", "o" * 97 + "/name",
])
def test_not_repo_ids(arg):
    assert hub.parse_repo_id(arg) is None


def test_patterns_never_fetch_a_config_only_targets_weights():
    assert not any("safetensors" in p or p.endswith((".bin", ".pt")) for p in hub.TARGET_CONFIG_FILES)
    assert {"config.json", "*.safetensors", "*.safetensors.index.json", "README.md"} <= set(hub.DRAFTER_FILES)
    assert set(hub.TOKENIZER_FILES) <= set(hub.TARGET_FILES) and "*.safetensors" in hub.TARGET_FILES


def test_local_paths_are_returned_unchanged_without_the_hub(tmp_path, monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the Hub was asked")

    monkeypatch.setattr(builtins, "__import__", _without("huggingface_hub", refuse_all=True))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "org" / "name").mkdir(parents=True)
    for arg in ("org/name", tmp_path / "org" / "name", "missing-dir", "./org/missing", "org/missing.gguf"):
        got = hub.resolve_dir(arg, flag="--drafter", allow_patterns=hub.DRAFTER_FILES)
        assert got == type(got)(arg) and str(got) == str(arg).removeprefix("./")


def test_snapshot_from_the_cache(hf_cache):
    main = add_snapshot(hf_cache, REPO, DRAFTER_SWA)
    v1 = add_snapshot(hf_cache, REPO, DRAFTER, refs=("v1", "refs/pr/1"))
    snaps = hf_cache / f"models--{REPO.replace('/', '--')}" / "snapshots"
    for arg, commit in ((REPO, main), (f"{REPO}@main", main), (f"{REPO}@v1", v1), (f"{REPO}@refs/pr/1", v1),
                        (f"{REPO}@{v1}", v1)):
        got = hub.resolve_dir(arg, flag="--drafter", allow_patterns=hub.DRAFTER_FILES, progress=False)
        assert got == snaps / commit, arg
        assert (got / "model.safetensors").read_bytes() == ((DRAFTER if commit == v1 else DRAFTER_SWA)
                                                             / "model.safetensors").read_bytes()


def test_target_snapshot(hf_cache):
    commit = add_snapshot(hf_cache, "dflash-test/tiny-target", TARGET)
    got = hub.resolve_dir("dflash-test/tiny-target", flag="--target", allow_patterns=hub.TARGET_FILES)
    assert got.name == commit and (got / "tokenizer.json").is_file()


def test_local_directory_named_like_the_repo_wins(hf_cache, tmp_path, monkeypatch):
    add_snapshot(hf_cache, REPO, DRAFTER_SWA)
    monkeypatch.chdir(tmp_path)
    (tmp_path / REPO).mkdir(parents=True)
    assert hub.resolve_dir(REPO, flag="--drafter", allow_patterns=hub.DRAFTER_FILES) == type(tmp_path)(REPO)


def test_offline_and_not_cached(hf_cache):
    with pytest.raises(HubError) as e:
        hub.resolve_dir("dflash-test/not-cached", flag="--drafter", allow_patterns=hub.DRAFTER_FILES)
    msg = str(e.value)
    assert "\n" not in msg and e.value.exit_code == 9
    assert msg.startswith("--drafter dflash-test/not-cached: no such local path, and dflash-test/not-cached is not in the "
                      "Hugging Face cache")
    assert str(hf_cache) in msg and "unset HF_HUB_OFFLINE" in msg and "`hf download dflash-test/not-cached`" in msg


def test_offline_unknown_revision(hf_cache):
    add_snapshot(hf_cache, REPO, DRAFTER)
    with pytest.raises(HubError) as e:
        hub.resolve_dir(f"{REPO}@v9", flag="SOURCE", allow_patterns=hub.DRAFTER_FILES)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"SOURCE {REPO}@v9: revision v9 of {REPO} is not in the Hugging Face cache")
    assert f"`hf download {REPO} --revision v9`" in msg


def test_missing_package_names_the_extra(monkeypatch):
    monkeypatch.setattr(builtins, "__import__", _without("huggingface_hub"))
    with pytest.raises(UsageError) as e:
        hub.resolve_dir(REPO, flag="--drafter", allow_patterns=hub.DRAFTER_FILES)
    assert "needs the 'huggingface_hub' package: pip install 'dflash-gguf[hub]'" in str(e.value)
    assert str(e.value).startswith(f"--drafter {REPO} (a Hugging Face repo id)")


# The online failures, as snapshot_download raises them (no network: the exceptions are made here).

def _http_error(name: str, status: int):
    httpx = pytest.importorskip("httpx")
    errors = pytest.importorskip("huggingface_hub.errors")
    if not hasattr(errors, "HfHubHTTPError") or "httpx" not in str(errors.HfHubHTTPError.__init__.__annotations__):
        pytest.skip("huggingface_hub < 1.0 (requests)")
    resp = httpx.Response(status, request=httpx.Request("GET", f"https://huggingface.co/api/models/{REPO}"))
    return getattr(errors, name)(f"{status} Client Error\nmore detail", response=resp)


def _raising(monkeypatch, exc):
    import huggingface_hub

    def fail(*a, **k):
        raise exc

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fail)


@pytest.mark.parametrize("name, status, expected", [
    ("GatedRepoError", 403, f"{REPO} is a gated repo and this token has no access to it; accept its license at "
                            f"https://huggingface.co/{REPO} and set HF_TOKEN"),
    ("RepositoryNotFoundError", 404, f"no Hugging Face repo {REPO} that this token can read, and no local path"),
    ("HfHubHTTPError", 401, f"no Hugging Face repo {REPO} that this token can read"),
    ("RevisionNotFoundError", 404, f"{REPO} has no revision 'nope'; give a branch, tag or commit"),
    ("HfHubHTTPError", 503, f"downloading {REPO}@nope failed (HfHubHTTPError: 503 Client Error)"),
])
def test_online_failures_are_one_line(monkeypatch, hf_cache, name, status, expected):
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)  # as if online; nothing is sent
    _raising(monkeypatch, _http_error(name, status))
    with pytest.raises(HubError) as e:
        hub.resolve_dir(f"{REPO}@nope", flag="--target", allow_patterns=hub.TARGET_FILES)
    assert expected in str(e.value) and "\n" not in str(e.value) and str(e.value).startswith(f"--target {REPO}@nope: ")


def test_unreachable_hub_and_nothing_cached(monkeypatch, hf_cache):
    httpx = pytest.importorskip("httpx")
    from huggingface_hub.utils import LocalEntryNotFoundError

    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    try:
        raise LocalEntryNotFoundError("Got: ConnectError\nAn error happened") from httpx.ConnectError("[Errno -2] no DNS")
    except LocalEntryNotFoundError as exc:
        _raising(monkeypatch, exc)
    with pytest.raises(HubError) as e:
        hub.resolve_dir(REPO, flag="--drafter", allow_patterns=hub.DRAFTER_FILES)
    assert (f"no such local path, the Hugging Face Hub cannot be reached (ConnectError: [Errno -2] no DNS), and {REPO} "
            "is not in the cache"
            in str(e.value))
    _raising(monkeypatch, httpx.ReadTimeout("timed out"))
    with pytest.raises(HubError, match=r"downloading .* failed \(ReadTimeout: timed out\); check the network"):
        hub.resolve_dir(REPO, flag="--drafter", allow_patterns=hub.DRAFTER_FILES)


def test_a_bug_keeps_its_traceback(monkeypatch, hf_cache):
    _raising(monkeypatch, KeyError("bug"))
    with pytest.raises(KeyError):
        hub.resolve_dir(REPO, flag="--drafter", allow_patterns=hub.DRAFTER_FILES)


def _without(package: str, refuse_all: bool = False):
    real = builtins.__import__

    def imp(name, *args, **kwargs):
        if name == package or name.startswith(package + "."):
            if refuse_all:
                raise AssertionError(f"{name} imported")
            raise ImportError(name)
        return real(name, *args, **kwargs)

    return imp


def test_snapshot_of_reads_the_cache_layout(hf_cache, tmp_path):
    commit = add_snapshot(hf_cache, REPO, DRAFTER)
    snap = hf_cache / f"models--{REPO.replace('/', '--')}" / "snapshots" / commit
    assert hub.snapshot_of(snap) == hub.Snapshot(REPO, commit)
    assert hub.snapshot_of(snap).url == f"https://huggingface.co/{REPO}/tree/{commit}"
    assert hub.snapshot_of(hub.resolve_dir(REPO, flag="x", allow_patterns=hub.DRAFTER_FILES, progress=False)) \
        == hub.Snapshot(REPO, commit)
    for not_one in (DRAFTER, snap.parent, tmp_path / "snapshots" / commit,
                    tmp_path / "datasets--a--b" / "snapshots" / commit,
                    tmp_path / "models--a--b--c" / "snapshots" / commit,
                    tmp_path / "models--a--b" / "snapshots" / "main"):
        assert hub.snapshot_of(not_one) is None, not_one
