"""The sources manifest's digests: the same whatever the chunk they are made in, and each one moved only by its
own source's files (real files on disk, stat'ed as a build does)."""

from __future__ import annotations

import json
import os

from vidvol.builders.writer import sources_manifest


def _frames(root, n_sources: int, n_frames: int, relative: bool = False) -> list[tuple[str, dict]]:
    """Sources of frame files; relative ones (after the first) also name strings with a `/` that are no files."""
    sources = []
    for i in range(n_sources):
        folder = os.path.join(root, f"exp{i}")
        os.makedirs(folder, exist_ok=True)
        frames = []
        for j in range(n_frames):
            path = os.path.join(folder, f"{j:03d}.jpg")
            with open(path, "wb") as f:
                f.write(b"\xff\xd8" + bytes([i, j]) * (i + 1))
            frames.append(os.path.relpath(path, root) if relative else path)
        tags = {"tags": [f"cls/fake{i}-{k}" for k in range(3)]} if relative and i else {}
        sources.append((f"exp{i}", {**tags, "frames": frames, "label": i % 3}))
    return sources


def test_digests_are_the_same_in_chunks_and_move_only_with_their_own_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the relative frames name files from here, as a relative manual_dir would
    absolute = _frames(str(tmp_path / "abs"), 12, 5)
    relative = [(f"r{k}", rec) for k, (_, rec) in enumerate(_frames(str(tmp_path), 6, 4, relative=True))]
    sources = {"train": absolute, "test": relative}

    whole = sources_manifest.digests(sources, str(tmp_path))
    monkeypatch.setattr(sources_manifest, "_CHUNK_PATHS", 7)  # many chunks, the relative ones among them
    chunked = sources_manifest.digests(sources, str(tmp_path))
    assert chunked == whole
    assert len(set(whole["train"].values())) == 12 and len(set(whole["test"].values())) == 6

    # One absolute frame and one relative frame grow: only their own sources' digests move, in chunks too. r3's
    # chunk starts with strings that are no files: its frames count as files because the plan's first ones do.
    with open(absolute[4][1]["frames"][2], "ab") as f:
        f.write(b"more")
    with open(relative[3][1]["frames"][0], "ab") as f:
        f.write(b"more")
    after = sources_manifest.digests(sources, str(tmp_path))
    moved = {(split, key) for split in whole for key in whole[split] if whole[split][key] != after[split][key]}
    assert moved == {("train", "exp4"), ("test", "r3")}
    monkeypatch.setattr(sources_manifest, "_CHUNK_PATHS", 1 << 20)
    assert sources_manifest.digests(sources, str(tmp_path)) == after


def test_the_manifest_is_written_in_pieces_as_one_dump_would_write_it(tmp_path):
    from vidvol.core import redact

    doc = {"format": 2, "inputs": "size+mtime", "build": "b", "generation": 1,
           "manual_dir": "s3://key:secret@bucket/m?X-Amz-Signature=abc",
           "splits": {"train": {f"c/v{i}.avi": f"{i:024x}" for i in range(300)}, "test": {"é/ü.avi": "0" * 24}},
           "shards": {"train": [{"file": f"x-{i}", "sources": [[f"c/v{i}.avi", 1, 100 + i]]} for i in range(30)],
                      "test": None},
           "odd": {"t": ("u", []), "n": [{"z": 1, "a": [3, "x"]}]}}
    path = sources_manifest.write(doc, str(tmp_path))
    with open(path, encoding="utf-8") as f:
        text = f.read()
    assert text == json.dumps(redact.data(doc), sort_keys=True, separators=(",", ":"))
    assert "secret" not in text and "abc" not in text and sources_manifest.read(str(tmp_path))["splits"] == doc["splits"]
    assert os.listdir(tmp_path) == ["sources.json"]  # no temporary file left
