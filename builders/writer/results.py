"""What a build's splits hold once written, and the words its summary ends with.

The driver reads the shards' sidecars (`collect_split`): examples per shard, keys, bytes and
skips, empty shards dropped and the rest renamed to their final names. The summary gives one
line per split (or why it is empty and so not registered) and where the skip report is.
"""

from __future__ import annotations

import collections
import dataclasses
import os
from typing import Any
from collections.abc import Callable, Sequence


from vidvol.builders.writer import json_files, outputs
from vidvol.builders.writer import progress
from vidvol.builders.writer import shards_file
from vidvol.builders.writer.plan import ShardTask
from vidvol.core import artifacts


@dataclasses.dataclass
class SplitResult:
    """What a split's shards hold once written: lengths, bytes, keys and skips (and why it is empty, if it is)."""

    name: str
    shard_paths: list[str]
    shard_lengths: list[int]
    num_bytes: int
    keys: list[str]
    skips: list[dict[str, str]]
    num_sources: int = 0  # inputs planned for the split
    empty_reason: str = ""  # the builder's word on why a split has no input at all
    # Per shard file, as its worker wrote it: file name, examples, bytes on disk, SHA-256 (see `shards_file`).
    shard_files: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    # Per shard file (as shard_files), its sources in record order: [source id, examples, record bytes]; None
    # where a sidecar did not say (a shard kept from a dead build of an older vidvol): then the dataset cannot grow.
    shard_sources: list[list[list] | None] = dataclasses.field(default_factory=list)

    @property
    def num_examples(self) -> int:
        return sum(self.shard_lengths)

    def why_empty(self) -> str:
        """Why the split has no example ("" when it has some): the builder's reason, or what its inputs became."""
        if self.num_examples:
            return ""
        if not self.num_sources:
            return self.empty_reason or "no input is listed for it"
        whole = [s for s in self.skips if not s.get("example")]
        if not whole:
            return f"its {self.num_sources} inputs gave no example"
        reasons = collections.Counter(_reason_kind(s["reason"]) for s in whole)
        causes = ", ".join(_counted(n, kind) for kind, n in reasons.most_common())
        every = "every input skipped" if len(whole) >= self.num_sources else f"{len(whole)} of {self.num_sources} inputs skipped"
        return f"{every}: {causes}"


# Skip reasons (`ExceptionName: message`) in plain words, for the summary of an empty split.
_REASON_WORDS = {
    "FileNotFoundError": ("missing file", "missing files"),
    "IsADirectoryError": ("folder instead of a file", "folders instead of files"),
    "PermissionError": ("unreadable file (permissions)", "unreadable files (permissions)"),
    "EOFError": ("truncated file", "truncated files"),
}


def _reason_kind(reason: str) -> str:
    return reason.split(":")[0]


def _counted(n: int, kind: str) -> str:
    one, many = _REASON_WORDS.get(kind, (kind, kind))
    return f"{n} {one if n == 1 else many}"


def collect_split(
    split: str, tasks: Sequence[ShardTask], final_path_fn: Callable[[int, int], str], *, empty_reason: str = ""
) -> SplitResult:
    """Reads the shards' sidecar infos, drops empty shards, renames the rest to their final names."""
    infos = [json_files.read_json(t.path + ".info.json") for t in tasks]
    for t in tasks:
        outputs.remove(t.path + ".info.json")
        outputs.remove(progress.progress_path(t.path))
    nonempty = [(t, i) for t, i in zip(tasks, infos) if i["keys"]]
    for t, i in zip(tasks, infos):
        if not i["keys"]:
            outputs.remove(t.path)
    paths, lengths, keys, skips, shard_files, shard_sources = [], [], [], [], [], []
    for new_index, (task, info) in enumerate(nonempty):
        final = final_path_fn(new_index, len(nonempty))
        if final != task.path:
            outputs.rename(task.path, final)
        paths.append(final)
        lengths.append(len(info["keys"]))
        keys.extend(info["keys"])
        shard_files.append(shards_file.shard_entry(final, split, len(info["keys"]), info.get("file_bytes"), info.get(shards_file.DIGEST)))
        shard_sources.append(info.get("sources"))
    for info in infos:
        skips.extend(info["skips"])
    dupes = [k for k, n in collections.Counter(keys).items() if n > 1]
    if dupes:
        raise ValueError(f"Split {split!r}: duplicate example keys {dupes[:5]}")
    return SplitResult(
        split, paths, lengths, sum(i["num_bytes"] for i in infos), keys, skips,
        num_sources=sum(len(t.sources) for t in tasks), empty_reason=empty_reason, shard_files=shard_files,
        shard_sources=shard_sources,
    )


def empty_split_line(name: str, split: str, why: str) -> str:
    """The summary line of a split left without an example: `NAME test: empty — WHY; not registered`."""
    return f"{name} {split}: empty — {why}; not registered (loading it lists the splits there are)"


def summary_line(name: str, result: SplitResult) -> str:
    """One line per split: examples, shards, bytes, and skips grouped by reason (or why the split is empty)."""
    whole = [s for s in result.skips if not s.get("example")]
    partial = [s for s in result.skips if s.get("example")]
    if not result.num_examples:
        return empty_split_line(name, result.name, result.why_empty())
    reasons = collections.Counter(_reason_kind(s["reason"]) for s in whole)
    why = ", ".join(f"{n} {r}" for r, n in reasons.most_common())
    line = (
        f"{name} {result.name}: {result.num_examples} examples in {len(result.shard_paths)} shards "
        f"({result.num_bytes / 2**20:.1f} MiB), {len(whole)} inputs skipped"
    )
    if why:
        line += f" ({why})"
    if partial:
        line += f", {len(partial)} parts masked inside written examples"
    return line


def skips_line(results: Sequence[SplitResult], data_dir: str) -> str:
    """`3 inputs skipped: see DIR/skip_report.json` (counts over every split; masked parts too)."""
    skipped = sum(1 for r in results for s in r.skips if not s.get("example"))
    masked = sum(1 for r in results for s in r.skips if s.get("example"))
    path = os.path.join(data_dir, artifacts.SKIP_REPORT_NAME)
    what = f"{skipped} inputs skipped" + (f", {masked} parts masked" if masked else "")
    return f"{what}: see {path}" if skipped or masked else f"{what} (skip report: {path})"


def build_summary(name: str, results: Sequence[SplitResult], data_dir: str) -> list[str]:
    """What a build ends with: one `summary_line` per split, then the skips and the skip report's path."""
    return [summary_line(name, r) for r in results] + [skips_line(results, data_dir)]
