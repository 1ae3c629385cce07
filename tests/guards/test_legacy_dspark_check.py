"""check on a legacy DSpark GGUF (formats/legacy_dspark.py): one error that names the migration,
instead of "not a DFlash drafter"; the migrated file is clean."""
from __future__ import annotations

import pytest

from dflash_gguf.convert import retarget
from dflash_gguf.guards.run import run_checks
from tests.formats.legacy_dspark_files import DONOR, mainline_drafter, to_legacy


@pytest.fixture(scope="module")
def old(tmp_path_factory):
    root = tmp_path_factory.mktemp("legacy-dspark-check")
    return to_legacy(mainline_drafter(root), root / "old.gguf")


def test_a_legacy_file_is_one_error_naming_the_migration(old):
    r = run_checks(old)
    assert [(f.severity.value, f.code, f.category) for f in r.findings] == [("error", "legacy-dspark", "drafter")]
    assert ("migrate: dflash-gguf retarget old.gguf --target-gguf DONOR.gguf -o OUT.gguf"
            in r.findings[0].message)


def test_with_a_target_it_is_not_called_a_non_drafter(old):
    codes = [f.code for f in run_checks(old, target=DONOR).findings]
    assert "legacy-dspark" in codes and "pair-not-drafter" not in codes


def test_the_migrated_file_is_clean(old, tmp_path):
    out = tmp_path / "new.gguf"
    retarget(old, out, format="llama.cpp", target_gguf=DONOR, drop_shared=True)
    r = run_checks(out, deep=True)
    assert r.findings == (), [f.message for f in r.findings]


def test_the_check_cli_fails_with_the_migration(cli, old):
    code, so, se = cli("check", old)
    assert code == 12 and "legacy-dspark" in so and "dflash-gguf retarget old.gguf" in so
