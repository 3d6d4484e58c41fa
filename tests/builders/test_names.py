"""Any file name a filesystem holds: hashed by its bytes (UTF-8 names exactly as before), shown as `caf\\xe9`
in keys, text features, the skip report and logs; what an example function raises that is a skip."""

from __future__ import annotations

import hashlib
import io
import logging
import os
import zlib

import cv2
import numpy as np
import pytest

from vidvol.builders import example_io
from vidvol.builders.sources import labels
from vidvol.builders.writer import plan
from vidvol.core import names

LATIN1 = os.fsdecode(b"caf\xe9.mp4")  # 'caf\udce9.mp4'
UTF8_NAMES = ["v_a_g01_c01.avi", "café.mp4", "日本語/clip 1.mkv", "emoji 🎬.webm", "a\\b.avi", "", "x" * 300]


def test_utf8_names_hash_and_order_exactly_as_before():
    for name in UTF8_NAMES:
        old = int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "big") / 2.0**64
        assert labels.hash_fraction(name) == old
        assert names.name_bytes(name) == name.encode("utf-8") == os.fsencode(name)
        assert names.shown(name) is name
    sources = [(n, i) for i, n in enumerate(UTF8_NAMES)]
    old_order = sorted(sources, key=lambda s: hashlib.sha256(f"train/{s[0]}".encode()).digest())
    assert plan.stable_order(sources, "train") == old_order


def test_a_name_that_is_not_utf8_hashes_as_its_bytes_and_is_shown_escaped():
    assert names.name_bytes(LATIN1) == b"caf\xe9.mp4" == os.fsencode(LATIN1)
    assert labels.hash_fraction(LATIN1) == labels.hash_fraction(b"caf\xe9.mp4")
    assert labels.hash_fraction(LATIN1) != labels.hash_fraction("café.mp4")  # Latin-1 é is not UTF-8 é
    assert labels.hashed_split(LATIN1, {"train": 0.5, "test": 0.5}) in ("train", "test")
    assert [s for s, _ in plan.stable_order([(LATIN1, 0), ("a", 1)], "train")]  # orders, no UnicodeEncodeError
    assert names.shown(LATIN1) == "caf\\xe9.mp4"
    assert names.shown("x\ud800y") == "x\\ud800y"  # a lone surrogate no filesystem gave: shown, never an error
    assert names.shown(os.fsdecode(b"\xff\xfe/\xc3\xa9")) == "\\xff\\xfe/é"


def test_streams_written_with_the_rule_show_names_the_same_way():
    stream = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors=names.NAMES_ERRORS)
    stream.write(f"skipped {LATIN1}\n")
    stream.flush()
    assert stream.buffer.getvalue().decode("utf-8") == "skipped caf\\xe9.mp4\n"


def test_keys_text_features_and_skips_are_written_as_shown():
    def fn(record):
        yield example_io.Skip(source=record, reason=f"{record}: frame 2 unreadable", example=record)
        yield record, {"video_id": f"cls/{record}", "n": 3}

    skip, (key, example) = example_io.run_example_fn(fn, (LATIN1, LATIN1), "train")
    assert key == "caf\\xe9.mp4" and example == {"video_id": "cls/caf\\xe9.mp4", "n": 3}
    assert skip.as_dict() == {"source": "caf\\xe9.mp4", "reason": "caf\\xe9.mp4: frame 2 unreadable",
                              "split": "train", "example": "caf\\xe9.mp4"}
    plain = {"video_id": "cls/a.avi", "n": 3}
    ((_, same),) = example_io.run_example_fn(lambda r: [("a.avi", plain)], ("a.avi", None), "train")
    assert same is plain  # UTF-8 examples pass untouched


def _raise(error):
    def fn(record):
        raise error
        yield

    return fn


def _cv2_error():
    try:
        cv2.resize(np.zeros((0, 0), np.uint8), (4, 4))
    except cv2.error as e:
        return e
    raise AssertionError("cv2.resize accepted an empty image")


def test_memory_errors_and_decoder_library_errors_are_skips_other_errors_fail():
    for error in (MemoryError(), ValueError("v"), EOFError("e"), OSError("o"), _cv2_error(), zlib.error("bad")):
        (skip,) = example_io.run_example_fn(_raise(error), ("s", None), "train")
        assert skip.source == "s" and skip.reason.startswith(type(error).__name__)
    for error in (KeyError("k"), TypeError("t"), RuntimeError("r")):
        with pytest.raises(type(error)):
            list(example_io.run_example_fn(_raise(error), ("s", None), "train"))
    # An error raised inside a decoding library's own code is about the input, whatever its class.
    inside = {"__name__": "nibabel.fake_header"}
    exec(compile("def parse():\n    raise TypeError('garbled header field')\n", "nibabel/fake_header.py", "exec"), inside)
    try:
        inside["parse"]()
    except TypeError as e:
        assert example_io.is_input_error(e)
    assert not example_io.is_input_error(KeyboardInterrupt())


def test_logs_written_through_the_build_log_show_names_escaped(tmp_path):
    from vidvol.builders.writer import build_log

    with build_log.session("names", str(tmp_path)) as session:
        logging.getLogger("vidvol.test_names").warning("skipping %s", LATIN1)
        path = session.log_path
    if path is None:  # VIDVOL_VERBOSE=1: no log file to read
        pytest.skip("VIDVOL_VERBOSE is set: the build writes no log file")
    text = open(path, encoding="utf-8").read()
    assert "skipping caf\\xe9.mp4" in text
