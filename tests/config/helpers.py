"""Config builders shared by the config tests: a fixture's config.json with overrides."""
from __future__ import annotations

import json

from tests.conftest import DRAFTERS


def write_cfg(tmp_path, cfg):
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return tmp_path


def flat(**over):
    cfg = json.loads((DRAFTERS / "qwen3-flat" / "config.json").read_text())
    cfg.update(over)
    return cfg
