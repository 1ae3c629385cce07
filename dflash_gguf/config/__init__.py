"""Drafter and target configs: config.json → resolved, validated dataclasses."""
from .drafter import (  # noqa: F401  (the package's public API)
    DFLASH1_ARCH, DFLASH2_ARCH, DrafterConfig, LAYER_TYPES, MASK_FILE, SUPPORTED_ARCHS, build_target_layer_ids,
    load_config, parse_config,
)
from .dspark import ALL_DSPARK_ARCHS, DSparkSpec  # noqa: F401
from .rope import RopeScaling  # noqa: F401
from .target import TargetConfig, load_target_config, parse_target_config  # noqa: F401
