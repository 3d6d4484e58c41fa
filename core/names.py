"""File names as vidvol hashes and shows them: any name a filesystem can hold, UTF-8 or not.

On POSIX a file name is bytes, which Python hands over as lone surrogates where they are not UTF-8
(`os.fsdecode(b"caf\\xe9.mp4")` is `"caf\\udce9.mp4"`); vidvol keeps that `str` to open the file,
hashes and orders it by its bytes (`name_bytes`) and shows it by one rule (`shown`). `NAMES_ERRORS`
is that rule as a codec error handler, for streams that write whatever text comes.
"""

from __future__ import annotations

import codecs

__all__ = ["NAMES_ERRORS", "name_bytes", "shown"]

NAMES_ERRORS = "vidvol.names"


def _escape_undecoded(error: UnicodeError) -> tuple[str, int]:
    """Codec error handler: a surrogate-escaped byte as `\\xNN`, any other lone surrogate as `\\uNNNN`."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    out = []
    for ch in error.object[error.start:error.end]:
        code = ord(ch)
        out.append(f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}")
    return "".join(out), error.end


codecs.register_error(NAMES_ERRORS, _escape_undecoded)


def name_bytes(name: str | bytes) -> bytes:
    """The bytes a name stands for (what vidvol hashes): `os.fsencode`'s on POSIX, UTF-8 for a UTF-8 name.

    vidvol hashes and orders a name by these bytes (spelled out so that every machine gets the same
    ones); for a UTF-8 name they are `name.encode("utf-8")`, so the split and shard order of every
    existing UTF-8 name is unchanged.

    Args:
      name: a file name as Python gives it (surrogate-escaped where not UTF-8), or its bytes.

    Returns:
      The name's bytes.
    """
    if isinstance(name, bytes):
        return name
    try:
        return name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate no filesystem gave (e.g. from a JSON string): keep it distinct
        return name.encode("utf-8", "surrogatepass")


def shown(text: str) -> str:
    """`text` as vidvol writes it: each byte that is not UTF-8 as `\\xNN`; valid UTF-8 text unchanged.

    The one rule wherever vidvol writes a name (example keys, text features such as `video_id`, label
    names, the skip report, the build log and the terminal): `caf\\xe9.mp4`.

    Args:
      text: a name or any text holding one.

    Returns:
      The text, writable by any UTF-8 writer.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", NAMES_ERRORS).decode("utf-8")
    return text
