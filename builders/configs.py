"""Few configs built by default, more reachable by name.

`tfds build NAME` with no config builds every registered BUILDER_CONFIG, decoding every input
once per config. A dataset registers the configs users want by default (`BUILDER_CONFIGS`) and
lists the rest in `NAMED_CONFIGS`: `tfds build NAME/CONFIG`, `tfds.load("NAME/CONFIG")` and
`tfds.builder(..., config="CONFIG")` find those by name (through TFDS's public
`get_builder_config` hook), while a bare `tfds build NAME` costs one pass.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow_datasets as tfds


class NamedConfigs:
    """Builder mixin: `NAMED_CONFIGS` resolve by name like registered configs but are not built by default."""

    NAMED_CONFIGS: Sequence[tfds.core.BuilderConfig] = ()

    @classmethod
    def all_configs(cls) -> list[tfds.core.BuilderConfig]:
        """Registered configs first (the default leads), then the ones reachable by name."""
        return [*cls.BUILDER_CONFIGS, *cls.NAMED_CONFIGS]  # type: ignore[attr-defined]

    @classmethod
    def get_builder_config(cls, name: str, version=None):
        found = super().get_builder_config(name, version)  # type: ignore[misc]
        if found is not None:
            return found
        for config in cls.NAMED_CONFIGS:
            if config.name == name and (version is None or config.version is None or str(config.version) == str(version)):
                return config
        return None
