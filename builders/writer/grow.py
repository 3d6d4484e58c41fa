"""Growing a prepared dataset: a build over a manual_dir that gained, changed or lost sources decodes only those.

Per split, against the dataset's `sources.json` (format 2: each source's digest and the shard holding its
examples): a shard whose sources are all kept is a hard link (never re-encoded, never read); a shard holding a
removed or changed source is rewritten by copying its kept serialized records (no decode, no re-encode); new
and changed sources are decoded into new shards. The grown dataset is built beside the prepared one (`run`),
then published into the same version folder under generation-tagged names (`publish`), so a reader of the
previous dataset keeps reading consistent shards until it reopens. docs/building.md says why and how.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import shutil
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from vidvol.builders.example_io import Source
from vidvol.builders.writer import build_lock, build_log, build_record
from vidvol.builders.writer import outputs
from vidvol.builders.writer import shards_file
from vidvol.builders.writer import sources_manifest
from vidvol.builders.writer.formats import write_records
from vidvol.builders.writer.plan import ShardTask, num_shards_for, plan_shards
from vidvol.builders.writer.results import SplitResult, collect_split
from vidvol.builders.writer.runner import resolve_runner
from vidvol.core import artifacts, redact, store, tfds_api, tfrecord

logger = logging.getLogger(__name__)

GROW_ENV = "VIDVOL_GROW"  # 0/false/no/off: a stale dataset stops the build (StaleDatasetError) instead of growing
DEFAULT_TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"
_SHARD_NAME = re.compile(r"\.[A-Za-z_]+-(g\d+-)?\d{5}-of-\d{5}$")


def _join(folder: str, name: str) -> str:
    return f"{folder}/{name}" if outputs.is_bucket(folder) else os.path.join(folder, name)


def _read_json(path: str) -> dict[str, Any]:
    """A small JSON file (local or in a bucket); {} where it is missing or unreadable."""
    try:
        return json.loads(outputs.read_bytes(path)) if outputs.exists(path) else {}
    except (OSError, ValueError):
        return {}


def enabled(flag: bool | None = None) -> bool:
    """Whether a stale dataset is grown (`flag`, else `VIDVOL_GROW`, on by default) rather than stopping the build."""
    if flag is not None:
        return bool(flag)
    return os.environ.get(GROW_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def template(generation: int) -> str:
    """The shard file name template of a dataset's `generation` (0: TFDS's default; n: tagged `-gn-`)."""
    return DEFAULT_TEMPLATE if not generation else DEFAULT_TEMPLATE.replace("-{SHARD_X_OF_Y}", f"-g{generation}-{{SHARD_X_OF_Y}}")


@dataclasses.dataclass(frozen=True)
class GrowFrom:
    """What a grow starts from: the prepared dataset's folder and manifest, and how its sources changed."""

    old_dir: str
    old_doc: dict[str, Any]
    changes: sources_manifest.Changes
    # The comparison's manifest of the manual_dir, which the grow's build takes instead of digesting the same sources
    # again: (its `plan_key`, the manifest).
    planned: tuple[tuple, Mapping[str, Any]] | None = dataclasses.field(default=None, compare=False, repr=False)

    def planned_all(self) -> None:
        """Drops the prepared manifest's per-source maps once every split is planned (kept ids and carried shards
        known): the decode that follows does not hold them. A GrowFrom serves one grow."""
        for key in ("splits", "shards"):
            self.old_doc.pop(key, None)


def plan_key(manual_dir: str | None, download_config, content: bool) -> tuple:
    """What decides a planning's digests beside its sources: the manual_dir, the examples cap, content digests."""
    return manual_dir, download_config.max_examples_per_split, bool(content)


def planned_manifest(grow: GrowFrom | None, key: tuple, generators: Mapping[str, Any]) -> dict[str, Any] | None:
    """A copy of the manifest the grow's comparison made (`GrowFrom.planned`) when the build plans the same source ids
    under the same `plan_key`; None otherwise (the build digests its sources itself)."""
    if grow is None or grow.planned is None or grow.planned[0] != key:
        return None
    digested = grow.planned[1]["splits"]
    if set(digested) != set(generators) or any({str(k) for k, _ in g.sources} != set(digested[split])
                                               for split, g in generators.items()):
        return None
    return dict(grow.planned[1])


@dataclasses.dataclass
class Carried:
    """One shard of the prepared dataset carried into the grown one: whole (a link) or its kept records copied."""

    file: str  # the prepared shard's file name
    sources: list[list]  # its kept sources in record order: [id, examples, record bytes]
    whole: bool  # every source with an example is kept: the file is kept as it is
    records: list[int]  # the indices of its records to copy (when not whole)
    total: int  # records in the prepared shard


def carried_shards(old_shards: Sequence[Mapping[str, Any]], kept: set[str]) -> list[Carried]:
    """The prepared split's shards that still hold a kept example, each whole or with the records to copy."""
    out = []
    for shard in old_shards:
        sources = shard["sources"]  # the manifest's own lists, not copied (a big collection's are many)
        keep = [s for s in sources if s[0] in kept]
        if not any(s[1] for s in keep):
            continue
        records, offset = [], 0
        for s in sources:
            if s[0] in kept:
                records.extend(range(offset, offset + s[1]))
            offset += s[1]
        whole = all(s[0] in kept for s in sources if s[1])
        out.append(Carried(shard["file"], keep, whole, records, offset))
    return out


def read_records(path: str, file_format: str) -> Iterator[bytes]:
    """The serialized records of a shard file, in order (TFRecord CRCs checked; ArrayRecord's own reader)."""
    if file_format == "array_record":
        from array_record.python import array_record_module

        reader = array_record_module.ArrayRecordReader(path)
        try:
            count = reader.num_records()
            for start in range(0, count, 64):
                yield from reader.read(list(range(start, min(count, start + 64))))
        finally:
            reader.close()
        return
    f, size = tfrecord.open_file(path)
    with f:
        for _, data in tfrecord.records(f, size):
            yield data


def carry(shard: Carried, old_dir: str, dest: str, file_format: str, old_entry: Mapping[str, Any] | None) -> dict[str, Any]:
    """Puts a carried shard at `dest`: a hard link to the prepared file (in a bucket: a server-side copy), or a
    copy of its kept records (a bucket's shard is downloaded to local scratch, and the copy uploaded).

    Returns:
      `{"digest", "file_bytes"}` of the file at `dest`.

    Raises:
      OSError: the prepared shard is missing, unreadable, or holds other records than its manifest says.
    """
    src = _join(old_dir, shard.file)
    if outputs.is_bucket(src):
        if shard.whole and old_entry is not None and old_entry.get(shards_file.DIGEST):
            store.copy(src, dest)
            return {"digest": old_entry[shards_file.DIGEST], "file_bytes": old_entry["num_bytes"]}
        with outputs.scratch_file(src) as local_src, outputs.scratch_file(dest) as local_dest:
            store.download(src, local_src)
            info = carry(dataclasses.replace(shard, file=os.path.basename(local_src), whole=False),
                         os.path.dirname(local_src), local_dest, file_format, None)
            store.upload(local_dest, dest)
        return info
    if shard.whole and old_entry is not None and old_entry.get(shards_file.DIGEST):
        try:
            os.link(src, dest)
        except OSError:  # a file system without hard links: a byte copy (still nothing decoded or encoded)
            shutil.copyfile(src, dest)
        if os.path.getsize(dest) != old_entry.get("num_bytes"):
            raise OSError(f"{src}: {os.path.getsize(dest)} bytes, but its shards.json entry says {old_entry.get('num_bytes')}")
        return {"digest": old_entry[shards_file.DIGEST], "file_bytes": old_entry["num_bytes"]}
    wanted = set(shard.records)
    seen = [0]

    def kept_records() -> Iterator[tuple[str, bytes]]:
        for index, data in enumerate(read_records(src, file_format)):
            seen[0] = index + 1
            if index in wanted:
                yield str(index), data

    try:
        write_records(file_format, dest, kept_records())
    except (ValueError, RuntimeError) as e:  # a damaged record (tfrecord.FrameError), ArrayRecord's errors
        raise OSError(f"{src}: {e}") from e
    if seen[0] != shard.total:
        raise OSError(f"{src} holds {seen[0]} records, but sources.json says {shard.total}")
    digest, size = shards_file.file_digest(dest)
    return {"digest": digest, "file_bytes": size}


@dataclasses.dataclass
class SplitGrow:
    """One split's grow: the shards carried (with their files in the build folder) and the sources to decode."""

    carried: list[tuple[Carried, str, dict[str, Any]]]  # (shard, its file in the build folder, digest and size)
    decode: list[Source]
    kept: set[str]
    rewritten: int = 0


def prepare_split(split: str, sources: Sequence[Source], kept: set[str], grow: GrowFrom, build_dir: str,
                  file_format: str) -> SplitGrow:
    """Carries the split's kept shards into `build_dir` (temporary names) and lists the sources to decode.

    A shard that cannot be carried (missing, damaged, not what the manifest says) has its kept sources decoded
    again, with a warning naming it.
    """
    old_shards = (grow.old_doc.get("shards") or {}).get(split) or []
    entries = {e["file"]: e for e in _read_json(_join(grow.old_dir, artifacts.SHARDS_NAME)).get("shards", [])}
    carried, again = [], set()
    for i, shard in enumerate(carried_shards(old_shards, kept)):
        dest = _join(build_dir, f"grow-{split}-{i:05d}.carried")
        try:
            carried.append((shard, dest, carry(shard, grow.old_dir, dest, file_format, entries.get(shard.file))))
        except OSError as e:
            outputs.remove(dest)
            logger.warning("cannot keep %s (%s): its %d kept sources are decoded again", shard.file, e, len(shard.sources))
            again.update(s[0] for s in shard.sources)
    decode = [s for s in sources if str(s[0]) not in kept or str(s[0]) in again]
    return SplitGrow(carried, decode, kept - again, rewritten=sum(1 for c, _, _ in carried if not c.whole))


def decode_tasks(split: str, grow: SplitGrow, example_bytes: int, max_shard_size: int, min_shards: int,
                 planned) -> list[ShardTask]:
    """Shard tasks for the split's new and changed sources (planned as a build plans its sources)."""
    if not grow.decode:
        return []
    n = num_shards_for(len(grow.decode), example_bytes, max_shard_size=max_shard_size, min_shards=min_shards)
    return plan_shards(split, grow.decode, n, planned)


def finish_split(split: str, tasks: Sequence[ShardTask], grow: SplitGrow, final_path_fn, old_dir: str, *,
                 empty_reason: str = "") -> SplitResult:
    """The split's result: decoded shards collected, carried shards named, kept sources' skips carried over."""
    c = len(grow.carried)
    result = collect_split(split, tasks, lambda i, n: final_path_fn(c + i, c + n), empty_reason=empty_reason)
    total = c + len(result.shard_paths)
    paths, lengths, files, sources, num_bytes = [], [], [], [], 0
    for j, (shard, tmp, info) in enumerate(grow.carried):
        final = final_path_fn(j, total)
        outputs.rename(tmp, final)
        examples = sum(s[1] for s in shard.sources)
        paths.append(final)
        lengths.append(examples)
        files.append(shards_file.shard_entry(final, split, examples, info["file_bytes"], info["digest"]))
        sources.append(shard.sources)
        num_bytes += sum(s[2] for s in shard.sources)
    old_skips = _read_json(_join(old_dir, artifacts.SKIP_REPORT_NAME)).get("skipped", [])
    carried_skips = [s for s in old_skips if s.get("split") == split and str(s.get("source")) in grow.kept]
    result.shard_paths[:0], result.shard_lengths[:0] = paths, lengths
    result.shard_files[:0], result.shard_sources[:0] = files, sources
    result.num_bytes += num_bytes
    result.skips[:0] = carried_skips
    result.num_sources += len(grow.kept)
    return result


def is_shard_file(name: str, dataset: str) -> bool:
    """Whether a file name is one of `dataset`'s shard files (any split, any generation)."""
    return name.startswith(f"{dataset}-") and bool(_SHARD_NAME.search(name))


def publish(built: str, live: str, dataset: str, live_files: set[str], new_files: set[str]) -> list[str]:
    """Moves a grown dataset's files from its build folder into the prepared dataset's version folder.

    First the shard files of generations before the live one go (kept one grow for their readers), then the new
    shard files come in (new names), then the metadata files replace the live ones, `dataset_info.json` last.
    `live_files` and `new_files`: the shard files the live and the grown manifests list.

    Returns:
      The file names removed (earlier generations' shards).
    """
    if outputs.is_bucket(live):
        return _publish_in_bucket(built, live, dataset, live_files, new_files)
    removed = []
    for name in sorted(os.listdir(live)):
        if is_shard_file(name, dataset) and name not in live_files and name not in new_files:
            os.remove(os.path.join(live, name))
            removed.append(name)
    for name in sorted(new_files):
        os.replace(os.path.join(built, name), os.path.join(live, name))
    last = "dataset_info.json"
    for name in sorted(os.listdir(built)):
        if name != last and os.path.isfile(os.path.join(built, name)):
            os.replace(os.path.join(built, name), os.path.join(live, name))
    os.replace(os.path.join(built, last), os.path.join(live, last))
    return removed


def _publish_in_bucket(built: str, live: str, dataset: str, live_files: set[str], new_files: set[str]) -> list[str]:
    """`publish` in a bucket: server-side copies, the metadata objects after the shards, `dataset_info.json` last."""
    removed = []
    for url in store.find(live):
        name = url[len(live) + 1:]
        if "/" not in name and is_shard_file(name, dataset) and name not in live_files and name not in new_files:
            store.remove(url)
            removed.append(name)
    names = [url[len(built) + 1:] for url in store.find(built)]
    last = "dataset_info.json"
    for name in sorted(names, key=lambda n: (n not in new_files, n == last, n)):
        if "/" not in name:
            store.copy(f"{built}/{name}", f"{live}/{name}")
    return removed


def staging_root(config_dir: str) -> str:
    """A fresh folder beside the version folders (same file system: hard links work) to build a grow in."""
    return os.path.join(config_dir, f"grow.{uuid.uuid4().hex[:12]}")


def summary_line(name: str, changes: sources_manifest.Changes, splits: Sequence[SplitResult],
                 grows: Mapping[str, SplitGrow], decoded_shards: int) -> str:
    """`NAME grown: 4 added, 1 changed, 1 removed, 15 kept sources; 3 shards kept, 1 rewritten, 2 new`."""
    carried = sum(len(g.carried) for g in grows.values())
    rewritten = sum(g.rewritten for g in grows.values())
    return (f"{name} grown: {changes.counts()} sources; {carried - rewritten} shards kept (hard links), "
            f"{rewritten} rewritten from their kept records, {decoded_shards} decoded")


def why_not(builder: Any, old_doc: Mapping[str, Any]) -> str:
    """Why a stale prepared dataset is not grown ("" when it is): growing off, a bucket, or an older manifest."""
    if not enabled(getattr(builder, "grow", None)):
        return f"growing is off: --no_grow or {GROW_ENV}=0"
    blocker = sources_manifest.grow_blocker(old_doc)
    return f"it cannot grow: {blocker}" if blocker else ""


def stale_message(name: str, where: str, manual_dir: str, changes: sources_manifest.Changes, why: str) -> str:
    """The StaleDatasetError of a dataset that is out of date and not grown: what changed, why not grown, the fix."""
    return "\n".join([
        f"{name} in {where} is out of date: its manual_dir {manual_dir} no longer holds what it was built from: "
        f"{changes.counts()} sources.", *changes.details(),
        f"It was not grown ({why}). The prepared dataset was left as it is and nothing was built. To build it from "
        "the manual_dir as it is now, run the build again with --overwrite (every source is decoded again)"
        + ("" if "growing is off" not in why else ", or without --no_grow (only the new and changed sources are decoded)")
        + "."])


def build_splits(builder: Any, generators: Mapping[str, Any], manifest: Mapping[str, Any],
                 download_config: Any) -> tuple[list[SplitResult], dict[str, Any], int]:
    """The grown dataset's splits, built in the builder's (TFDS `incomplete.*`) folder: carried and decoded shards.

    Returns:
      Each split's result, its file name template (this generation's) and the generation.
    """
    grow: GrowFrom = builder._grow_from
    name = builder._display_name()
    generation = int(grow.old_doc.get("generation") or 0) + 1
    if grow.old_doc.get("build") == manifest.get("build"):
        kept = sources_manifest.kept_ids(grow.old_doc, manifest)
    else:
        kept = {split: set() for split in manifest["splits"]}
        logger.warning("%s: what decides the examples' bytes besides the inputs changed since the dataset was built "
                       "(config, features such as label names, file format, vidvol/TFDS version or shard options): "
                       "no shard is kept, every source is decoded again", name)
    for line in grow.changes.details():
        logger.info("%s: %s", name, line.strip(), extra=build_log.CONSOLE)
    build_dir = builder._out(os.fspath(builder.data_path))
    builder._remote_incomplete = build_dir if outputs.is_bucket(build_dir) else None  # published when TFDS is done
    fmt = builder._file_format().value
    templates = {split: dataclasses.replace(tfds_api.filename_template(builder, split), template=template(generation))
                 for split in generators}
    grows, tasks = {}, {}
    for split, gen in generators.items():
        grows[split] = prepare_split(split, gen.sources, kept.get(split, set()), grow, build_dir, fmt)
        planned = lambda i, n, t=templates[split]: builder._out(os.fspath(t.sharded_filepath(shard_index=i, num_shards=n))) + ".partial"
        tasks[split] = decode_tasks(split, grows[split], builder._estimated_example_bytes(),
                                    builder._max_shard_size(download_config), builder.MIN_SHARDS, planned)
    all_tasks = [t for ts in tasks.values() for t in ts]
    grow.planned_all()
    if all_tasks:
        runner, options = resolve_runner(
            download_config.beam_runner, download_config.beam_options, len(all_tasks),
            num_sources=sum(len(t.sources) for t in all_tasks),
            manual_dir=os.fspath(download_config.manual_dir) if download_config.manual_dir else None)
        builder._build_runner = build_record.runner_name(runner)
        builder._build_workers = options.get_all_options().get("direct_num_workers") if options else None
        builder._run_pipeline(all_tasks, generators, runner, options, tasks)
    for leftover in [] if outputs.is_bucket(build_dir) else os.listdir(build_dir):
        if leftover.endswith(".tmp"):
            os.remove(os.path.join(build_dir, leftover))  # attempts of tasks a runner retried elsewhere
    results = []
    for split, t in templates.items():
        final = lambda i, n, t=t: builder._out(os.fspath(t.sharded_filepath(shard_index=i, num_shards=n)))
        results.append(finish_split(split, tasks[split], grows[split], final, grow.old_dir,
                                    empty_reason=generators[split].empty_reason))
    builder._grow_line = summary_line(name, grow.changes, results, grows, len(all_tasks))
    logger.info("%s", builder._grow_line)
    return results, templates, generation


def run(builder: Any, grow: GrowFrom, download_dir: Any, download_config: Any, **kwargs: Any) -> None:
    """Grows the prepared dataset of `builder`: builds the grown one beside it (`build_splits`), then publishes it.

    Under the config's build lock: a build that waited for another one compares again first (the other may have
    grown it already). The prepared dataset is left as it is until the grown one is complete; the folder the
    grow was built in is removed whatever happens.
    """
    name = builder._display_name()
    local = os.fspath(builder.data_path)
    live, config_dir = builder._out(local), os.path.dirname(local)
    with build_lock.hold(builder.data_path, what=name) as lock:
        if lock.waited_for is not None:
            builder._checked = None  # the build it waited for may have grown it: compare again
            grow = builder.check_up_to_date(download_config, download_dir)
            if grow is None:
                builder.info.read_from_directory(builder.data_path)
                return None
        for left in os.listdir(config_dir):  # grows killed before they finished (this one holds the lock)
            if left.startswith("grow.") and os.path.isdir(os.path.join(config_dir, left)):
                logger.info("%s: removing %s, left by a grow that did not finish", name, left)
                shutil.rmtree(os.path.join(config_dir, left), ignore_errors=True)
        root = staging_root(config_dir)
        live_files = sources_manifest.shard_files(grow.old_doc)
        try:
            kw = {"config": builder.builder_config} if builder.builder_config is not None else {}
            staging = type(builder)(data_dir=root, version=str(builder.version), file_format=builder.info.file_format, **kw)
            staging._grow_from, staging._published, staging.bucket = grow, live, builder.bucket
            staging.resume, staging._log_dir = False, config_dir  # its build log beside the dataset's others
            staging.hash_inputs = grow.old_doc.get("inputs") == "content"
            staging.download_and_prepare(download_dir=download_dir, download_config=download_config, **kwargs)
            built = staging._out(os.fspath(staging.data_path))
            if staging._shard_files is None:  # its manifest (the shards' list) was never written
                raise RuntimeError(f"{name}: the grown dataset in {redact.url(built)} has no {sources_manifest.MANIFEST_NAME}; "
                                   "nothing was published, the prepared dataset is as it was")
            removed = publish(built, live, builder.name, live_files, staging._shard_files)
            if removed:
                logger.info("%s: removed %d shard files of an earlier generation (kept one grow for its readers)",
                            name, len(removed))
        finally:
            builder._checked = None  # the dataset (and this GrowFrom, `planned_all`) changed: a next build compares again
            shutil.rmtree(root, ignore_errors=True)
            if builder.bucket is not None:
                with contextlib.suppress(Exception):
                    store.remove_tree(builder.bucket.remote(root))
    builder._grow_line = staging._grow_line
    if builder.bucket is None:
        builder.info.read_from_directory(builder.data_path)
    return None
