"""Runs a command as `python -c CODE` or `python -m MODULE` would, and records who imported TensorFlow, Beam and OpenCV.

Usage: `python tests/import_probe.py OUT.json (-c CODE | -m MODULE) [ARGS...]`. A meta-path finder notes the
Python stack of the first real import of each watched top-level module (a bare `importlib.util.find_spec`
probe, such as TensorFlow's own look for Keras, is no import); OUT.json then maps each watched module found
in `sys.modules` at exit to that stack (innermost last), and `"exit"` to the command's exit code.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import traceback

WATCHED = ("tensorflow", "apache_beam", "cv2")


class _Recorder:
    """A meta-path finder that finds nothing: it notes the stack of the first import of each watched module."""

    def __init__(self):
        self.stacks: dict[str, list[str]] = {}

    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in WATCHED and top not in self.stacks and _is_import(sys._getframe(1)):
            frames = traceback.extract_stack(sys._getframe(1))
            self.stacks[top] = [f"{f.filename}:{f.lineno} {f.line or ''}".rstrip() for f in frames
                                if not f.filename.startswith("<frozen importlib") and f.filename != __file__]
        return None


def _is_import(frame) -> bool:
    """Whether the finder was asked by the import statement's machinery (not by `importlib.util.find_spec`)."""
    caller = frame.f_back  # `_find_spec`'s caller: `_find_and_load_unlocked` for an import
    return caller is not None and caller.f_code.co_name == "_find_and_load_unlocked"


def main() -> None:
    out, mode, target, *args = sys.argv[1:]
    recorder = _Recorder()
    sys.meta_path.insert(0, recorder)
    code = 0
    try:
        if mode == "-c":
            sys.argv = ["-c", *args]
            sys.path[0] = ""  # as `python -c` has it
            exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})
        else:
            sys.argv = [target, *args]
            sys.path[0] = os.getcwd()  # as `python -m` has it
            runpy.run_module(target, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    found = {m: recorder.stacks.get(m, ["(imported before the probe started)"]) for m in WATCHED if m in sys.modules}
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"exit": code, "imported": found}, f)


if __name__ == "__main__":
    main()
