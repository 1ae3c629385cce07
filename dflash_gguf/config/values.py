"""Typed checks for config.json values, shared by the drafter, target and RoPE parsers.

JSON allows any type for any key. Every value is checked here before it is used, so a wrong
type or range raises ConfigError naming the key and the file instead of a TypeError deep in
the converter.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..errors import ConfigError

INT32_MAX = 2**31 - 1  # sizes and ids end up as GGUF (u)int32 values
MAX_LAYERS = 1 << 16  # far above any real model; bounds per-layer loops on a corrupt config
# Far above any real model (head dims 64-512, blocks 7-16 in fixtures/published), they bound what
# a config alone may make us allocate before any tensor shape is checked: per-frequency RoPE
# tables (head_dim / 2 entries, a Python loop for llama3 scaling) and the reference's per-block
# buffers (a DSpark block's KV rows).
MAX_HEAD_DIM = 1 << 16
MAX_BLOCK_SIZE = 1 << 12
FLOAT32_MAX = 3.4028234663852886e38  # float knobs end up as GGUF float32 values


def read_config_json(location: str | Path, missing: str, fix: str = "") -> tuple[dict[str, Any], Path]:
    """The JSON object in ``location`` (a model dir's config.json, or the file itself) and its path.

    Raises:
        ConfigError: ``<path>: <missing>`` when absent; not JSON (``fix`` appended); not an object.
    """
    path = Path(location)
    cfg_path = path / "config.json" if path.is_dir() else path
    if not cfg_path.is_file():
        raise ConfigError(f"{cfg_path}: {missing}")
    try:
        raw = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: bad JSON/UTF-8, ints over 4300 digits
        raise ConfigError(f"{cfg_path}: not valid JSON ({exc}){fix}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{cfg_path}: top level must be a JSON object")
    return raw, cfg_path


def coerce(value: Any, kind: type, where: str, path: Path, lo: int | None = 1, hi: int = INT32_MAX) -> Any:
    """``value`` as an int in [lo, hi] (``lo=None``: no lower bound) or a finite float32-sized float.

    Raises:
        ConfigError: wrong type (a bool is not a number) or out of range.
    """
    if isinstance(value, bool):
        raise ConfigError(f"{path}: {where} must be a number, got {value!r:.80}")
    if kind is int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int):
            raise ConfigError(f"{path}: {where} must be an integer, got {value!r:.80}")
        if not (-hi if lo is None else lo) <= value <= hi:
            low = f"{-hi:,}" if lo is None else f"{lo}"
            raise ConfigError(f"{path}: {where} = {_short(value)} is out of range ({low}..{hi:,}); fix config.json")
        return value
    if not isinstance(value, (int, float)):
        raise ConfigError(f"{path}: {where} must be a number, got {value!r:.80}")
    try:
        number = float(value)
    except OverflowError:
        raise ConfigError(f"{path}: {where} is an integer too large for a float; fix config.json") from None
    if not math.isfinite(number):
        raise ConfigError(f"{path}: {where} is {_short(value)}; fix config.json")
    if abs(number) > FLOAT32_MAX:
        raise ConfigError(f"{path}: {where} = {_short(value)} does not fit the GGUF's float32; fix config.json")
    return number


def flag(value: Any, where: str, path: Path) -> bool | None:
    """A JSON boolean, or None when absent (null).

    Raises:
        ConfigError: any other type (``"false"`` would otherwise read as true).
    """
    if value is not None and not isinstance(value, bool):
        raise ConfigError(f"{path}: {where} must be true or false, got {value!r:.80}")
    return value


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 40 else f"{text[:20]}…({len(text)} digits)"


class Resolver:
    """Typed lookups that remember where each value came from (integers default to >= 1)."""

    def __init__(self, raw: dict[str, Any], path: Path):
        self.raw = raw
        self.path = path
        dflash = raw.get("dflash_config") or {}
        if not isinstance(dflash, dict):
            raise ConfigError(f"{path}: dflash_config must be an object, got {type(dflash).__name__}")
        self.dflash = dflash
        self.sources: dict[str, str] = {}
        self.warnings: list[str] = []

    def _lookup(self, name: str, nested: bool) -> tuple[Any, str | None]:
        if nested and self.dflash.get(name) is not None:
            return self.dflash[name], f"dflash_config.{name}"
        if self.raw.get(name) is not None:
            return self.raw[name], f"config.{name}"
        return None, None

    def _get(self, name: str, nested: bool, required: bool, default: Any, kind: type, **bounds) -> Any:
        value, source = self._lookup(name, nested)
        if value is None:
            if default is not None:
                self.sources[name] = "default"
                return default
            if required:
                where = f"dflash_config.{name} or top-level {name}" if nested else name
                raise ConfigError(f"{self.path}: required key {where} is missing; add it to config.json")
            return None
        self.sources[name] = source
        return coerce(value, kind, source, self.path, **bounds)

    def top_int(self, name: str, required: bool = True, default: int | None = None,
                lo: int | None = 1, hi: int = INT32_MAX) -> int:
        return self._get(name, False, required, default, int, lo=lo, hi=hi)

    def top_float(self, name: str, required: bool = True, default: float | None = None) -> float:
        return self._get(name, False, required, default, float)

    def knob_int(self, name: str, required: bool = False, default: int | None = None,
                 lo: int | None = 1) -> int | None:
        value = self._get(name, True, required, default, int, lo=lo)
        if self.sources.get(name) == "default":
            self.warnings.append(f"{name} not in config; using the reference default {default}")
        return value

    def knob_float(self, name: str) -> float | None:
        return self._get(name, True, False, None, float)
