"""Drafter and target configs: config.json → resolved, validated dataclasses."""
from .._lazy import lazy_exports
from .drafter import (  # noqa: F401  (the package's public API)
    DFLASH1_ARCH, DFLASH2_ARCH, DrafterConfig, MASK_FILE, SUPPORTED_ARCHS, build_target_layer_ids, load_config,
    parse_config,
)
from .attention import LAYER_TYPES, HFAttention  # noqa: F401
from .dspark import ALL_DSPARK_ARCHS, DSparkSpec  # noqa: F401
from .rope import RopeScaling  # noqa: F401

# The target's config is read by --target-dir, parity and the reference only: imported on first
# use, so a convert from a target GGUF does not create its dataclass (~1 ms of start-up).
__getattr__ = lazy_exports(__name__, dict.fromkeys(("TargetConfig", "load_target_config", "parse_target_config"),
                                                   "target"))
