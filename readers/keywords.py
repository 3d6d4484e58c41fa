"""Keyword checks of the public readers: a retired keyword names its new spelling, a misspelt one the closest."""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable
from typing import Any

# Keywords retired in 0.2.0 (the readers' keywords before `ReadSpec`) -> (ReadSpec part, its class, field).
RETIRED_SPEC: dict[str, tuple[str, str, str]] = {
    "clip_length": ("clips", "Clips", "length"),
    "clip_stride": ("clips", "Clips", "stride"),
    "eval_clips": ("clips", "Clips", "eval_clips"),
    "mean": ("normalize", "Normalize", "mean"),
    "std": ("normalize", "Normalize", "std"),
    "resize": ("normalize", "Normalize", "resize"),
    "output_dtype": ("output", "Output", "dtype"),
    "mask_dtype": ("output", "Output", "mask_dtype"),
    "features": ("output", "Output", "features"),
    "inputs": ("output", "Output", "inputs"),
    "target": ("output", "Output", "target"),
}
RETIRED_TUNING = ("cycle_length", "memory_budget_bytes", "deterministic", "parse_per_batch", "direct_reads")
SUPERVISED = ("clip_length", "clip_stride", "eval_clips", "mean", "std", "inputs", "target", "mask_dtype")
LOAD = SUPERVISED + ("resize", "features", "output_dtype")


def new_spelling(keyword: str, value: Any) -> str:
    """How `keyword=value` is written since 0.2.0, e.g. "spec=vidvol.ReadSpec(clips=vidvol.Clips(length=16))"."""
    shown = "..." if value is Ellipsis else repr(value)
    if keyword in RETIRED_TUNING:
        return f"tuning=vidvol.Tuning({keyword}={shown})"
    part, cls, field = RETIRED_SPEC[keyword]
    return f"spec=vidvol.ReadSpec({part}=vidvol.{cls}({field}={shown}))"


def checked(*retired: str, tuning: bool = False) -> Callable[[Callable], Callable]:
    """Decorator: `fn`'s unknown keywords are a TypeError naming the closest accepted one, and its `retired` keywords
    (with `tuning`, Tuning's fields too) a TypeError giving the new spelling."""

    def wrap(fn: Callable) -> Callable:
        params = inspect.signature(fn).parameters
        passes_on = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())  # e.g. distribute -> load
        accepted = [n for n, p in params.items() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        gone = set(retired) | (set(RETIRED_TUNING) if tuning else set())
        where = fn.__qualname__

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            for k, v in kwargs.items():
                if k in gone:
                    raise TypeError(f"{where}() no longer takes {k}= (retired in vidvol 0.2.0): pass "
                                    f"{new_spelling(k, v)} (CHANGELOG.md)")
            unknown = [k for k in kwargs if k not in accepted]
            if unknown and not passes_on:
                close = difflib.get_close_matches(unknown[0], accepted + sorted(gone), n=1)
                hint = f"; it takes {', '.join(accepted)}"
                if close:
                    now = f" (since 0.2.0: {new_spelling(close[0], ...)})" if close[0] in gone else ""
                    hint = f"; did you mean {close[0]!r}{now}?"
                raise TypeError(f"{where}() got an unexpected keyword argument {unknown[0]!r}{hint}")
            return fn(*args, **kwargs)

        return wrapper

    return wrap
