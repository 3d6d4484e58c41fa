"""TFDS's private API is used in core/tfds_api.py alone, and its public fallbacks give the same bytes."""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow_datasets as tfds

from package_files import package_paths, plant
from vidvol.builders.writer import example_bytes
from vidvol.core import tfds_api

ROOT = pathlib.Path(__file__).resolve().parents[2]  # the repository root is the `vidvol` package
HOME = pathlib.Path("core/tfds_api.py")


def private_uses(path: pathlib.Path) -> list[str]:
    """`line: name` of every private TFDS name a file imports or reaches through a TFDS module or class."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    tfds_names, found = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            tfds_names.update(a.asname or a.name.split(".")[0] for a in node.names if a.name.startswith("tensorflow_datasets"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tensorflow_datasets"):
            for a in node.names:
                tfds_names.add(a.asname or a.name)
                if a.name.startswith("_"):
                    found.append(f"{node.lineno}: {node.module}.{a.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in tfds_names:
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return sorted(found, key=lambda use: int(use.split(":")[0]))


def package_private_uses(root: pathlib.Path) -> dict[str, list[str]]:
    """{file: private TFDS uses} for every installed module of vidvol but core/tfds_api.py."""
    out = {}
    for path in package_paths(root):
        rel = path.relative_to(root)
        if rel == HOME:
            continue
        if uses := private_uses(path):
            out[str(rel)] = uses
    return out


def test_no_module_but_tfds_api_touches_tfds_private_api():
    assert package_private_uses(ROOT) == {}
    assert private_uses(ROOT / HOME)  # the checker sees the uses where they are allowed


def test_the_checker_sees_a_private_import_and_a_private_attribute(tmp_path):
    plant(tmp_path, {"builders/w.py": (
        "import tensorflow_datasets as tfds\n"
        "from tensorflow_datasets.core import example_serializer as es\n"
        "from tensorflow_datasets.core.example_serializer import _as_bytes\n"
        "x = es._item_to_np_array(1)\n"
        "y = tfds.core.DatasetBuilder._get_filename_template\n"
        "z = self_like._private\n")})
    assert package_private_uses(tmp_path) == {"builders/w.py": [
        "3: tensorflow_datasets.core.example_serializer._as_bytes",
        "4: es._item_to_np_array",
        "5: tfds.core.DatasetBuilder._get_filename_template",
    ]}


def test_the_direct_serializer_takes_tfds_internals_from_tfds_api_only():
    assert tfds_api.available("example_serializer")
    parts = tfds_api.serializer_parts()
    assert parts is not None and parts.as_bytes("é") == "é".encode()
    features = tfds.features.FeaturesDict({"x": tfds.features.Tensor(shape=(2,), dtype=np.int64)})
    assert example_bytes.Serializer(features).fast


_PUBLIC_ONLY_SCRIPT = """
import sys, numpy as np, tensorflow_datasets as tfds
from vidvol.builders.writer import example_bytes
from vidvol.core import tfds_api
assert tfds_api.serializer_parts() is None and not tfds_api.available("example_serializer")
features = tfds.features.FeaturesDict({"x": tfds.features.Tensor(shape=(3,), dtype=np.int64), "t": tfds.features.Text(),
                                       "s": tfds.features.Sequence(tfds.features.Sequence(np.int32))})
serializer = example_bytes.Serializer(features)
assert not serializer.fast
print(serializer({"x": np.array([1, -2, 300]), "t": "clip é", "s": [[1, 2], [], [3]]}).hex())
"""


@pytest.mark.slow
def test_public_only_writes_the_same_bytes_through_tfds_own_serializer():
    env = dict(os.environ, **{tfds_api.PUBLIC_ONLY_ENV: "1"})
    proc = subprocess.run([sys.executable, "-c", _PUBLIC_ONLY_SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    features = tfds.features.FeaturesDict({"x": tfds.features.Tensor(shape=(3,), dtype=np.int64), "t": tfds.features.Text(),
                                           "s": tfds.features.Sequence(tfds.features.Sequence(np.int32))})
    fast = example_bytes.Serializer(features)
    assert fast.fast
    expected = fast({"x": np.array([1, -2, 300]), "t": "clip é", "s": [[1, 2], [], [3]]})
    assert proc.stdout.strip().splitlines()[-1] == expected.hex()
