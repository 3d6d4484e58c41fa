"""The old name of `vidvol.testing.samples`: the very same module, for code that still imports `vidvol.samples`.

`benchmarks/` imports it by this name until it moves to `vidvol.testing.samples`; new code imports that.
"""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("vidvol.testing.samples")
