"""Every whole number in a drafter's or a target's config.json set to a value that would size an
allocation absurdly: `convert` answers with one documented line (or a clean success) within
bounded memory and time, under an address-space cap that a bomb would hit.

CI sweeps the bundled example (`fixtures/drafters/qwen3-flat` with `fixtures/targets/qwen3-tiny`)
at 2**31 - 1. ``DFLASH_REDTEAM_FULL=1`` sweeps every entry of the published corpus too, at
2**31 - 1 and 2**24 (docs/fuzzing.md: the offline run).
"""
from __future__ import annotations

import json
import os
import shutil

import pytest

from dflash_gguf.errors import EXIT_OK, ConfigError, TargetError, UsageError, WeightsError
from tests.conftest import FIXTURES
from tests.redteam.harness import assert_bounded, assert_one_line_error, fingerprint, leftovers, run_cli

FULL = os.environ.get("DFLASH_REDTEAM_FULL") == "1"
DRAFTER = FIXTURES / "drafters" / "qwen3-flat"
TARGET_DIR = FIXTURES / "targets" / "qwen3-tiny"
VALUES = (2**31 - 1, 2**24) if FULL else (2**31 - 1,)
# A usage error (a format that cannot hold the result), the config, the weights (shapes that no
# longer match), the target: the codes convert documents for a config it cannot use.
CODES = {EXIT_OK, UsageError.exit_code, ConfigError.exit_code, WeightsError.exit_code, TargetError.exit_code}
# No torch and no numba on this path: the cap keeps a regression from taking the machine down.
ADDRESS_SPACE_MIB = 3072


def _int_paths(obj, prefix=()):
    """The JSON paths of every whole number (not bool) in a config."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _int_paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _int_paths(v, (*prefix, i))
    elif isinstance(obj, int) and not isinstance(obj, bool):
        yield prefix


def _set(obj, path, value):
    for k in path[:-1]:
        obj = obj[k]
    obj[path[-1]] = value


def _cases():
    sources = [("qwen3-flat", "drafter", DRAFTER / "config.json"), ("qwen3-flat", "target", TARGET_DIR / "config.json")]
    if FULL:
        from tests.convert.published import load_index, slug_dir

        sources += [(e["slug"], "drafter", slug_dir(e["slug"]) / "config.json") for e in load_index()]
    for name, side, cfg in sources:
        for path in _int_paths(json.loads(cfg.read_text(encoding="utf-8"))):
            for value in VALUES:
                yield pytest.param(name, side, path, value, id=f"{name}-{side}-{'.'.join(map(str, path))}={value}")


@pytest.mark.parametrize("name, side, path, value", list(_cases()))
def test_a_huge_config_number_is_one_line(tmp_path, name, side, path, value):
    if name == "qwen3-flat":
        drafter, target = tmp_path / "drafter", tmp_path / "target"
        shutil.copytree(DRAFTER, drafter)
        shutil.copytree(TARGET_DIR, target)
        args = ["--target-dir", target]
    else:
        from tests.convert.published import sparse_checkpoint

        drafter, target = tmp_path / "drafter", None
        sparse_checkpoint(name, drafter, side_files=False)
        args = ["--format", "lucebox"]
    edited = (drafter if side == "drafter" else target) / "config.json"
    cfg = json.loads(edited.read_text(encoding="utf-8"))
    _set(cfg, path, value)
    edited.write_text(json.dumps(cfg), encoding="utf-8")
    files = [p for d in (drafter, target) if d is not None for p in d.iterdir()]
    before = fingerprint(files)
    out = tmp_path / "out" / "d.gguf"
    out.parent.mkdir()
    r = run_cli(["convert", drafter, *args, "-o", out], timeout=120, address_space_mib=ADDRESS_SPACE_MIB)
    assert_one_line_error(r, CODES)
    assert_bounded(r, rss_mib=1024, wall_s=60)
    assert fingerprint(files) == before
    assert leftovers(out.parent) == [] and (out.exists() == (r.code == EXIT_OK))
