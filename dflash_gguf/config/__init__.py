"""Drafter and target configs: config.json → resolved, validated dataclasses."""
from .drafter import (  # noqa: F401  (the package's public API)
    DFLASH1_ARCH, DFLASH2_ARCH, DrafterConfig, LAYER_TYPES, RopeScaling, SUPPORTED_ARCHS,
    TargetConfig, build_target_layer_ids, load_config, load_target_config, parse_config,
    parse_target_config,
)
