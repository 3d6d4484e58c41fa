"""Every CSV list a dataset reads (labels.csv, video lists, per-video series), read so a failure names file and line.

Python's `csv` module fails on two things real exports contain without saying where: a byte that
is not UTF-8 and a field longer than `csv.field_size_limit()`; `rows` turns either, and any other
`csv.Error`, into a ValueError naming the file, the line and the fix (see `rows`).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator

from vidvol.builders.sources import files


class CsvError(ValueError):
    """A CSV list cannot be read: the message names the file and line and says how to fix it."""


def _utf8_error(path: str, data: bytes, e: UnicodeDecodeError) -> str:
    line = data.count(b"\n", 0, e.start) + 1
    column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
    bad = data[e.start:max(e.end, e.start + 1)]
    name = files.basename(path)
    return (f"{path}:{line}: byte {bad.hex(' ')} at column {column} is not UTF-8 ({e.reason}); CSV lists are read as "
            f"UTF-8: save the file as UTF-8 (a spreadsheet's \"CSV UTF-8\", or `iconv -f cp1252 -t utf-8 {name} > "
            f"fixed.csv` if it was written on Windows, `-f latin1` for Latin-1) and build again")


def read_text(path: str, *, error: type[ValueError] = CsvError) -> str:
    """The whole file as text (strict UTF-8, a byte-order mark dropped); a non-UTF-8 byte is `error` naming the line."""
    data = files.read_bytes(path)
    data = data[3:] if data.startswith(b"\xef\xbb\xbf") else data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(_utf8_error(path, data, e)) from None


def _csv_error(path: str, first: int, last: int, e: csv.Error) -> str:
    said = str(e)
    where = f"{path}:{first}" + (f" (the record starting there runs to line {last})" if last > first else "")
    if "field larger than field limit" in said:
        return (f"{where}: a field longer than {csv.field_size_limit()} characters, Python's csv limit. That is almost "
                f"always a quote (\") opening a field that is never closed, so the lines after it are read as one "
                f"field: close the quote, or write a quote inside a field as two (\"\"), then build again")
    return f"{where}: not valid CSV ({said}); fix that line (quotes: a quoted field ends at a lone \") and build again"


def rows(path: str, *, error: type[ValueError] = CsvError) -> Iterator[tuple[int, list[str]]]:
    """(line number, cells) of each record of the CSV file `path` (the line its record ends on, as `csv.reader`'s
    `line_num`); a non-UTF-8 byte, an over-long field or malformed CSV is `error` naming file, line and fix.

    The two failures Python's `csv` module reports without saying where: a byte that is not UTF-8 (a
    list saved as Latin-1 or Windows-1252 by a spreadsheet: `UnicodeDecodeError: 'utf-8' codec can't
    decode byte 0xe9 in position 8191`, a position in the decoder's buffer, not the file) and a
    field longer than `csv.field_size_limit()` (131072 characters: `_csv.Error: field larger than
    field limit`), almost always a quote opened and never closed, which swallows the rest of the
    file into one field.

    The file is read whole (CSV lists are small next to what they list; a URL is one request
    anyway), decoded strictly as UTF-8 (a byte-order mark is dropped), and either failure, and any
    other `csv.Error`, becomes a ValueError (the dataset's own error class where it passes one)
    naming the file, the line and the fix. The limit is kept, not raised: a cell that long is never
    a path, a label or a number.
    """
    reader = csv.reader(io.StringIO(read_text(path, error=error), newline=""))
    while True:
        first = reader.line_num + 1
        try:
            record = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise error(_csv_error(path, first, reader.line_num, e)) from None
        yield reader.line_num, record


def dict_rows(path: str, *, error: type[ValueError] = CsvError) -> tuple[list[str], Iterator[tuple[int, dict]]]:
    """(the header row, then (line number, {column: cell}) per record) as `csv.DictReader` gives them: empty lines
    skipped, a missing cell None; errors as in `rows`."""
    records = rows(path, error=error)
    header = next(records, (0, []))[1]

    def body() -> Iterator[tuple[int, dict]]:
        for line, record in records:
            if record:
                yield line, {name: (record[i] if i < len(record) else None) for i, name in enumerate(header)}

    return header, body()


def first_row(path: str) -> list[str] | None:
    """The first record of a CSV file (to recognise a header), None when its first line is not UTF-8 CSV."""
    head = files.read_bytes(path).split(b"\n", 1)[0]
    try:
        text = head.decode("utf-8-sig")
        return next(csv.reader([text]), [])
    except (UnicodeDecodeError, csv.Error):
        return None
