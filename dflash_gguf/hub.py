"""Hugging Face repo ids where a checkpoint directory is taken: ``ORG/NAME`` or ``ORG/NAME@REVISION``.

``resolve_dir`` turns such an argument into the directory of a cached snapshot (downloading what is
missing) and leaves anything else to the caller. huggingface_hub does the downloading, the cache
layout and the environment (HF_HOME, HF_HUB_CACHE, HF_TOKEN, HF_HUB_OFFLINE, HF_ENDPOINT); this
module only decides when to ask it, which files to ask for, and turns its exceptions into one
HubError line each (docs/hub.md).
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from .errors import HubError

# What each role downloads: never more than the command reads (a target's weights are tens of GB).
WEIGHTS_FILES = ("config.json", "*.safetensors", "*.safetensors.index.json")
TOKENIZER_FILES = (
    "tokenizer*", "*.tiktoken", "*.model", "tekken.json", "special_tokens_map.json", "added_tokens.json",
    "vocab.json", "merges.txt", "chat_template*", "*.jinja",
)
# A drafter checkpoint: weights, the optional mask embedding, the model card, its tokenizer if it ships one.
# generation_config.json: mainline's metadata reads its sampling defaults (general.sampling.*).
DRAFTER_FILES = (*WEIGHTS_FILES, "mask_embedding.pt", "README.md", "generation_config.json", *TOKENIZER_FILES)
# A target whose weights run (parity, diagnose --target).
TARGET_FILES = (*WEIGHTS_FILES, "generation_config.json", "README.md", *TOKENIZER_FILES)
# A target read for its config and tokenizer only (convert --target-dir): no weights.
TARGET_CONFIG_FILES = ("config.json", "generation_config.json", *TOKENIZER_FILES)
# A drafter read for its config only (check --source compares a GGUF with it): no weights.
DRAFTER_CONFIG_FILES = ("config.json",)

# The Hub's naming rules (huggingface_hub's validate_repo_id): letters, digits, '-', '_', '.', not
# starting or ending with '-' or '.', at most 96 characters, no '--' or '..'. Exactly one '/': a bare
# NAME (the Hub allows it for old models) would be any relative path, so it is never taken as a repo.
_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
_REPO = re.compile(rf"(?P<repo>{_PART}/{_PART})(?:@(?P<rev>[^\s@]+))?")


def parse_repo_id(arg: str | Path) -> tuple[str, str | None] | None:
    """``(repo_id, revision or None)`` when ``arg`` reads as ``ORG/NAME[@REV]``, else None.

    A Path is taken as typed (``Path("./a/b")`` prints as ``a/b``, so a Path built from a string
    that started with ``./`` is indistinguishable; callers pass what the user typed where it matters).
    """
    text = str(arg)
    m = _REPO.fullmatch(text)
    if m is None:
        return None
    repo = m.group("repo")
    if "--" in repo or ".." in repo or repo.lower().endswith((".git", ".gguf")):
        # '--' and '..' are refused by the Hub; a name ending in .gguf is a missing GGUF file, whose
        # own "not found" message is the useful one.
        return None
    return repo, m.group("rev")


@dataclass(frozen=True)
class Snapshot:
    """A directory that is huggingface_hub's cached snapshot of a repo at one commit."""

    repo_id: str
    commit: str

    @property
    def repo_url(self) -> str:
        return f"https://huggingface.co/{self.repo_id}"

    @property
    def url(self) -> str:
        """The repo's files at exactly this commit."""
        return f"{self.repo_url}/tree/{self.commit}"


def commit_in_url(url: str) -> str | None:
    """What follows ``/tree/`` in a ``Snapshot.url`` (the commit, as convert records it in
    ``general.source.url``), or None for a URL without it."""
    _, sep, commit = url.rpartition("/tree/")
    return commit if sep and commit else None


_SNAPSHOT_COMMIT = re.compile(r"[0-9a-f]{40}")


def snapshot_of(path: str | Path) -> Snapshot | None:
    """The repo and commit when ``path`` is a snapshot in a Hugging Face cache
    (``…/models--ORG--NAME/snapshots/<commit>``, what ``resolve_dir`` and ``hf download`` return),
    else None. Read from the path alone: the cache layout is huggingface_hub's documented one, and
    nothing needs importing or downloading to know it."""
    p = Path(path).absolute()
    if not _SNAPSHOT_COMMIT.fullmatch(p.name) or p.parent.name != "snapshots":
        return None
    kind, _, rest = p.parent.parent.name.partition("--")
    parts = rest.split("--")
    if kind != "models" or len(parts) != 2 or not all(parts):
        return None
    return Snapshot(f"{parts[0]}/{parts[1]}", p.name)


def resolve_dir(arg: str | Path, *, flag: str, allow_patterns: Sequence[str], progress: bool = True,
                narrow: Callable[[Path], Sequence[str] | None] | None = None) -> Path:
    """The directory ``arg`` names: an existing local path, unchanged (a local ``org/name`` beats
    the repo of that name); else, for ``ORG/NAME[@REV]``, the cached snapshot of that repo with
    ``allow_patterns`` downloaded; else ``Path(arg)`` unchanged, for the caller's own "not found".
    ``narrow``: given the snapshot with its small files only (config.json, the shard index, card,
    tokenizer), the weight files to fetch instead of every ``*.safetensors`` (None: all of them);
    a DeepSeek-V4 checkpoint's draft is a few of its 46 shards.

    ``flag`` names the option in messages (``--drafter``). Raises HubError (one line: what, which
    repo and revision, how to fix), or UsageError when huggingface_hub is not installed.
    """
    path = Path(arg)
    try:
        if path.exists():
            return path
    except OSError:  # a name too long to be a path (nor a repo id): the caller's message says so
        return path
    parsed = parse_repo_id(arg)
    if parsed is None:
        return path
    repo_id, rev = parsed
    from ._lazy import require

    hub = require("huggingface_hub", f"{flag} {arg} (a Hugging Face repo id)", "hub",
                  alternative=f"or download it with `hf download {repo_id}` and pass its directory")
    from huggingface_hub import constants

    kwargs = {}
    if _offline(constants):
        # What HF_HUB_OFFLINE means; said outright because snapshot_download, given a commit hash,
        # would otherwise ask the Hub for the file list of a snapshot cached before it kept one.
        kwargs["local_files_only"] = True
    if not progress:
        kwargs["tqdm_class"] = _quiet_tqdm()
    try:
        if narrow is not None:
            small = [p for p in allow_patterns if not p.endswith(".safetensors")]
            only = narrow(Path(hub.snapshot_download(repo_id, revision=rev, allow_patterns=small, **kwargs)))
            if only is not None:
                allow_patterns = [*small, *only]
        return Path(hub.snapshot_download(repo_id, revision=rev, allow_patterns=list(allow_patterns), **kwargs))
    except Exception as exc:  # noqa: BLE001 - every Hub failure becomes one line; anything unknown re-raises
        raise _hub_error(exc, flag=flag, arg=str(arg), repo_id=repo_id, rev=rev) from exc


def _quiet_tqdm():
    from huggingface_hub.utils import tqdm

    class Quiet(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

    return Quiet


def _hub_error(exc: Exception, *, flag: str, arg: str, repo_id: str, rev: str | None) -> Exception:
    """``exc`` from snapshot_download as a HubError; an exception that is no Hub or network
    failure is returned as it is (a bug should keep its traceback)."""
    from huggingface_hub import constants
    from huggingface_hub.utils import (
        GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled, RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = f"{flag} {arg}"
    at = f"@{rev}" if rev else ""
    download = f"`hf download {repo_id}{f' --revision {rev}' if rev else ''}`"
    url = f"https://huggingface.co/{repo_id}"
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, GatedRepoError):  # before RepositoryNotFoundError: it is one
        return HubError(f"{where}: {repo_id} is a gated repo and this token has no access to it; accept its "
                        f"license at {url} and set HF_TOKEN (or run `hf auth login`)")
    if isinstance(exc, RepositoryNotFoundError) or status == 401:
        return HubError(f"{where}: no Hugging Face repo {repo_id} that this token can read, and no local path "
                        f"{arg}; check the spelling, or for a private repo set HF_TOKEN (or run `hf auth login`)")
    if isinstance(exc, RevisionNotFoundError):
        return HubError(f"{where}: {repo_id} has no revision {rev!r}; give a branch, tag or commit of "
                        f"{url} (see its 'Files and versions' tab)")
    if isinstance(exc, OfflineModeIsEnabled) or (isinstance(exc, LocalEntryNotFoundError) and _offline(constants)):
        cache = Path(constants.HF_HUB_CACHE)
        cached = (cache / f"models--{repo_id.replace('/', '--')}").is_dir()
        what = (f"revision {rev or 'main'} of {repo_id} is not in the Hugging Face cache" if cached
                else f"no such local path, and {repo_id}{at} is not in the Hugging Face cache")
        return HubError(f"{where}: {what} ({cache}) and HF_HUB_OFFLINE is set; unset HF_HUB_OFFLINE, or "
                        f"download it first with {download}")
    if isinstance(exc, LocalEntryNotFoundError):  # the Hub was unreachable and the cache has no copy
        cause = exc.__cause__ or exc
        return HubError(f"{where}: no such local path, the Hugging Face Hub cannot be reached "
                        f"({_first_line(cause)}), and {repo_id}{at} is not in the cache; check the network (a proxy, HF_ENDPOINT), or download it first "
                        f"with {download}")
    if _is_network_error(exc) or isinstance(exc, HfHubHTTPError):
        return HubError(f"{where}: downloading {repo_id}{at} failed ({_first_line(exc)}); check the network "
                        f"(a proxy, HF_ENDPOINT) and try again, or download it with {download}")
    if isinstance(exc, OSError):  # a full disk, an unwritable cache
        return HubError(f"{where}: downloading {repo_id}{at} into the Hugging Face cache "
                        f"({constants.HF_HUB_CACHE}) failed ({_first_line(exc)}); free space or set HF_HOME")
    return exc


def _offline(constants) -> bool:
    return bool(constants.is_offline_mode() if hasattr(constants, "is_offline_mode") else constants.HF_HUB_OFFLINE)


def _is_network_error(exc: BaseException) -> bool:
    """A transport failure of the HTTP client huggingface_hub uses: httpx from 1.0, requests
    before. Looked up in sys.modules: a client that was never imported raised nothing."""
    httpx, requests = sys.modules.get("httpx"), sys.modules.get("requests")
    kinds = ((httpx.TransportError,) if httpx is not None else ()) + \
            ((requests.exceptions.RequestException,) if requests is not None else ())
    return isinstance(exc, kinds)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
