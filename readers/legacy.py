"""The readers' keywords before `ReadSpec` (`clip_length=16`, `mean=`, `cycle_length=4`...), for one release.

`old_keywords(...)` wraps a reader: each old keyword becomes its field of `spec=ReadSpec(...)` (or
of `tuning=Tuning(...)`) with a `DeprecationWarning` that gives the new spelling exactly, so the
reader itself takes only the new objects and gives identical results. An old keyword together
with a changed spec part it belongs to is a `TypeError` naming both (which one would win is not
obvious); an unknown keyword a `TypeError` naming the closest accepted one. Delete this module,
and its decorators, when the old spelling goes.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import warnings
from typing import Any, Callable

from vidvol.readers.spec import Clips, Normalize, Output, ReadSpec, Tuning

# old keyword -> (ReadSpec part, field of that part)
SPEC_KEYWORDS: dict[str, tuple[str, str]] = {
    "clip_length": ("clips", "length"),
    "clip_stride": ("clips", "stride"),
    "eval_clips": ("clips", "eval_clips"),
    "mean": ("normalize", "mean"),
    "std": ("normalize", "std"),
    "resize": ("normalize", "resize"),
    "output_dtype": ("output", "dtype"),
    "mask_dtype": ("output", "mask_dtype"),
    "features": ("output", "features"),
    "inputs": ("output", "inputs"),
    "target": ("output", "target"),
}
TUNING_KEYWORDS = tuple(f.name for f in dataclasses.fields(Tuning))
_PARTS = {"clips": Clips, "normalize": Normalize, "output": Output}
# What each reader took before ReadSpec (the old keywords it keeps accepting for one release).
SUPERVISED = ("clip_length", "clip_stride", "eval_clips", "mean", "std", "inputs", "target", "mask_dtype")
LOAD = SUPERVISED + ("resize", "features", "output_dtype")


def new_spelling(keyword: str, value: Any) -> str:
    """How `keyword=value` is written now, e.g. "spec=vidvol.ReadSpec(clips=vidvol.Clips(length=16))" (`...`: any value)."""
    shown = "..." if value is Ellipsis else repr(value)
    if keyword in TUNING_KEYWORDS:
        return f"tuning=vidvol.Tuning({keyword}={shown})"
    part, field = SPEC_KEYWORDS[keyword]
    return f"spec=vidvol.ReadSpec({part}=vidvol.{_PARTS[part].__name__}({field}={shown}))"


def translate(where: str, old: dict[str, Any], spec: ReadSpec | None, tuning: Tuning | None) -> tuple[ReadSpec, Tuning | None]:
    """`spec` and `tuning` with the old keywords `old` folded in; warns once per keyword (stack: the caller's caller)."""
    base = spec if spec is not None else ReadSpec()
    fields: dict[str, dict[str, Any]] = {}
    tuning_fields: dict[str, Any] = {}
    for keyword, value in old.items():
        if keyword in TUNING_KEYWORDS:
            if tuning is not None:
                raise TypeError(f"{where}() got {keyword}= and tuning=, which both set Tuning.{keyword}; pass only "
                                f"tuning=vidvol.Tuning(..., {keyword}={value!r})")
            tuning_fields[keyword] = value
            continue
        part, field = SPEC_KEYWORDS[keyword]
        if getattr(base, part) != _PARTS[part]():
            raise TypeError(f"{where}() got {keyword}= and spec.{part} ({getattr(base, part)!r}), which both set the "
                            f"{part}; pass only spec=vidvol.ReadSpec({part}=vidvol.{_PARTS[part].__name__}(..., "
                            f"{field}={value!r}))")
        fields.setdefault(part, {})[field] = value
    for keyword, value in old.items():
        warnings.warn(f"{keyword}={value!r} is deprecated: pass {new_spelling(keyword, value)}", DeprecationWarning,
                      stacklevel=3)  # translate <- the reader's wrapper <- the user's call
    parts = {part: dataclasses.replace(getattr(base, part), **f) for part, f in fields.items()}
    return dataclasses.replace(base, **parts), (Tuning(**tuning_fields) if tuning_fields else tuning)


def old_keywords(*keywords: str, tuning: bool = False) -> Callable[[Callable], Callable]:
    """Decorator: `fn` (taking `spec=` and, with `tuning`, `tuning=`) also accepts the old `keywords` (and Tuning's fields)."""

    def wrap(fn: Callable) -> Callable:
        params = inspect.signature(fn).parameters
        passes_on = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())  # e.g. distribute -> load
        accepted = [n for n, p in params.items() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        known = set(keywords) | (set(TUNING_KEYWORDS) if tuning else set())
        where = fn.__qualname__

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            old = {k: kwargs.pop(k) for k in list(kwargs) if k in known}
            unknown = [k for k in kwargs if k not in accepted]
            if unknown and not passes_on:
                close = difflib.get_close_matches(unknown[0], accepted + sorted(known), n=1)
                hint = f"; it takes {', '.join(accepted)}"
                if close:
                    now = f" (deprecated: {new_spelling(close[0], ...)})" if close[0] in known else ""
                    hint = f"; did you mean {close[0]!r}{now}?"
                raise TypeError(f"{where}() got an unexpected keyword argument {unknown[0]!r}{hint}")
            if old:
                spec, tune = translate(where, old, kwargs.get("spec"), kwargs.get("tuning"))
                kwargs["spec"] = spec
                if tuning:
                    kwargs["tuning"] = tune
            return fn(*args, **kwargs)

        return wrapper

    return wrap
