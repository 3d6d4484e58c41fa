"""`python -m vidvol report NAME/CONFIG --data_dir DIR [--out FILE.html]`: one self-contained page per dataset.

The page holds the dataset's card, its splits, label counts and distributions, previews of a few
examples per class, the skip report and `verify`'s verdict; images are inlined, nothing is fetched.
What it samples to stay small and quick (`gather.Limits`) is written on the page. Notebook:
`IPython.display.HTML(filename=vidvol.report("hmdb51/split1_20x64x64", data_dir=...))`.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from tensorflow_datasets.core.utils.lazy_imports_utils import tensorflow as tf  # imported on first use
import tensorflow_datasets as tfds

import vidvol  # noqa: F401  (registers the datasets and their feature classes)
from vidvol.builders.writer import outputs
from vidvol.builders.writer.shards_file import load_shards_file
from vidvol.cli import verify
from vidvol.cli.report_parts import gather, media, svg
from vidvol.cli.report_parts.page import definitions, document, esc, figure, human_bytes, raw_figure, skips_html, table
from vidvol.core import artifacts, redact, store
from vidvol.core.version import VERSION

REPORT_NAME = "report.html"


def _ranges(indices: Sequence[int]) -> str:
    """`3-7, 10` for [3, 4, 5, 6, 7, 10]."""
    out, start = [], None
    for k, i in enumerate(indices):
        if start is None:
            start = i
        if k + 1 == len(indices) or indices[k + 1] != i + 1:
            out.append(f"{start}-{i}" if i > start else f"{i}")
            start = None
    return ", ".join(out)


def _card(builder: tfds.core.DatasetBuilder, facts: dict[str, Any], data_path: str) -> str:
    info = builder.info
    workers = facts.get("workers")
    runner = facts.get("runner", "not recorded (built before vidvol wrote build.json)")
    pairs = [("name", info.name), ("config", builder.builder_config.name if builder.builder_config else "(none)"),
             ("config description", builder.builder_config.description if builder.builder_config else None),
             ("version", str(info.version)), ("file format", str(getattr(info.file_format, "value", None) or "tfrecord")),
             ("built", facts.get("started", "not recorded")),
             ("build duration", f"{facts['seconds']:.1f} s" if isinstance(facts.get("seconds"), (int, float)) else "not recorded"),
             ("runner", f"{runner}, {workers} workers" if workers else runner),
             ("built by vidvol", facts.get("vidvol_version", "not recorded")),
             ("build log", facts.get("log")), ("folder", redact.url(data_path))]
    rows = []
    for key, feature in info.features.items():
        note = f"{feature.num_classes} classes" if isinstance(feature, tfds.features.ClassLabel) else ""
        dtype = getattr(feature, "np_dtype", None)
        rows.append((key, type(feature).__name__, str(tuple(feature.shape)) if hasattr(feature, "shape") else "",
                     getattr(dtype, "__name__", str(dtype)), note))
    return (definitions(pairs) + "<h3 id=features>Features</h3>" + table(["feature", "type", "shape", "dtype", "note"], rows)
            + "<h3 id=description>Description</h3><pre>" + esc(info.description or "(none)") + "</pre>"
            + "<h3 id=citation>Citation</h3><pre>" + esc(info.citation or "(none)") + "</pre>")


def _splits(samples: Sequence[gather.SplitSample], skips: dict | None) -> str:
    rows = [(s.name, s.examples, s.shards, human_bytes(s.num_bytes), s.num_bytes,
             f"could not be read: {s.error}" if s.error else
             "all" if s.read_shards == s.shards else f"{s.read_shards} of {s.shards} shards") for s in samples]
    empty = (skips or {}).get("empty_splits") or {}
    rows += [(name, 0, 0, "0 B", 0, f"empty: {why}") for name, why in sorted(empty.items())]
    return table(["split", "examples", "shards", "size", "bytes", "read for this page"], rows, numeric=[1, 2, 4])


def _sampled_note(s: gather.SplitSample) -> str:
    if s.read_shards == s.shards:
        return f"{s.name}: all {s.read_examples} examples"
    return f"{s.name}: {s.read_examples} of {s.examples} examples ({s.read_shards} of {s.shards} shards, evenly spread)"


def _labels(samples: Sequence[gather.SplitSample], names: list[str]) -> str:
    counts = {s.name: np.bincount(s.labels, minlength=len(names)) for s in samples if s.labels is not None}
    if not counts:
        return "<p>No label counts: no split could be read.</p>"
    seen = np.flatnonzero(sum(counts.values()) > 0)
    chart = svg.label_bars([names[i] for i in seen], {k: v[seen].tolist() for k, v in counts.items()},
                           "examples per class and split")
    none = [names[i] for i in range(len(names)) if i not in set(seen.tolist())]
    missing = (f"<p>{len(none)} of {len(names)} classes have no example in what was read: {esc(', '.join(none))}.</p>"
               if none else "")
    return raw_figure(chart, "Examples per class, counted over " + "; ".join(_sampled_note(s) for s in samples)
                      + ".") + missing


def _distributions(kind: str, samples: Sequence[gather.SplitSample]) -> str:
    out = []
    for s in samples:
        if kind == "fire":
            values = np.concatenate(s.hrr) if s.hrr else np.zeros(0)
            out.append(raw_figure(svg.histogram(values, f"HRR of the real frames, {s.name}", "HRR (kW)"),
                                  f"{s.name}: HRR of {values.size} real frames; {_sampled_note(s)}."))
        elif s.intensities is not None:
            out.append(raw_figure(svg.histogram(s.intensities, f"intensities inside the mask, {s.name}", "intensity"),
                                  f"{s.name}: {s.intensities.size} in-mask voxels of {s.histogram_volumes} volumes "
                                  "evenly spread over the split's read records."))
    return "".join(out)


def _preview(kind: str, ex: dict[str, Any], title: str) -> tuple[list[str], str]:
    """(the data: URIs of one example's images, its figure markup)."""
    if kind == "volume":
        vol, mask = np.asarray(ex["volume"]), np.asarray(ex["mask"])
        uri = media.data_uri(media.slices_png(vol, mask), "image/png")
        cover = float((mask > 0).mean()) if mask.size else 0.0
        alt = f"{title}: sagittal, coronal and axial centre slices of a {vol.shape} volume, mask outlined in yellow"
        return [uri], figure(uri, alt, f"{title}: shape {vol.shape}, {cover:.0%} of voxels from the image "
                                       "(yellow: the mask's edge; left to right: sagittal, coronal, axial)")
    # ex["video"]: the encoded frames at ex["frame_positions"] only (gather.decode_chosen), decoded when drawn
    frames, mask, where = ex["video"], np.asarray(ex["mask"]).reshape(-1), list(ex["frame_positions"])
    masked = np.flatnonzero(mask == 0).tolist()
    masked_text = f"masked frames {_ranges(masked)} (grey, red band)" if masked else "no masked frame"
    flags = [not mask[i] for i in where]
    if kind == "fire":
        uri = media.data_uri(media.strip_jpeg(frames, flags), "image/jpeg")
        alt = f"{title}: frames {', '.join(map(str, where))} of {len(mask)}; {masked_text}"
        chart = svg.curve(ex["hrr"], mask, f"HRR of {title}", "HRR (kW)")
        return [uri], raw_figure(f'<img src="{uri}" alt="{esc(alt)}"><br>{chart}',
                                 f"{title}: {int(mask.sum())} of {len(mask)} frames real; {masked_text}; "
                                 f"frames shown: {', '.join(map(str, where))}")
    data, width = media.clip_webp(frames, flags)
    uri = media.data_uri(data, "image/webp")
    alt = f"Animated clip {title}: {len(where)} of {len(mask)} frames, {masked_text}"
    return [uri], figure(uri, alt, f"{title}: {int(mask.sum())} of {len(mask)} frames real; {masked_text}",
                         width=width * max(1, media.MAX_SIDE // width))  # small frames drawn up to MAX_SIDE


def _previews(kind: str, sample: gather.SplitSample | None, builder, limits: gather.Limits) -> tuple[str, int]:
    """The previews' markup and the bytes of their images."""
    if sample is None or not sample.chosen:
        return "<p>No example to preview.</p>", 0
    names = gather.class_names(builder.info.features)
    idk = gather.id_key(builder.info.features)
    out, used, left_out = [], 0, 0
    for i in sorted(sample.chosen, key=lambda i: (int(sample.chosen[i].get("label", 0)), i)):
        ex = sample.chosen[i]
        bits = [names[int(ex["label"])]] if names is not None and "label" in ex else []
        bits += [gather.as_text(ex[idk])] if idk else [f"record {i}"]
        if kind == "fire" and "window" in ex:
            bits.append(f"window {int(ex['window'])}")
        uris, html = _preview(kind, ex, " | ".join(bits))
        size = sum(len(u) for u in uris)
        if used + size > limits.image_bytes:
            left_out += 1
            continue
        used += size
        out.append(html)
    group = "experiment" if kind == "fire" else "class"
    head = (f"<p>Split {esc(sample.name)}: up to {limits.per_class} examples per {group}, the first ones in storage "
            f"order, {limits.max_previews} at most; {len(out)} shown.")
    if left_out:
        head += f" {left_out} more left out to keep the page's images under {human_bytes(limits.image_bytes)}."
    gallery = '<div class="gallery">' if kind == "video" else "<div>"
    return head + "</p>" + gallery + "".join(out) + "</div>", used


def shard_status(data_path: str, spec: str, data_dir: str, total_bytes: int, limits: gather.Limits,
                 remote=None) -> tuple[str, list[str]]:
    """`verify`'s verdict on the shards (`OK`, `BROKEN`, `NOT VERIFIED`), or, past `verify_bytes`, a check of each
    shard's size and example count against `shards.json` (`SIZES MATCH`); with the lines that explain it.

    `remote`: `(fetch, bucket version)` of a dataset in a bucket (`data_path` holds its metadata only).
    """
    if total_bytes <= limits.verify_bytes:
        try:
            found = verify.verify(data_path, dataset=spec, data_dir=data_dir, fetch=remote[0] if remote else None)
        except Exception as e:  # verify itself stopped on a damaged file: the page says so rather than failing
            return "BROKEN", [f"the check stopped: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                              "run it alone for the details: " + artifacts.verify_command(spec, data_dir)]
        return ("OK" if found.verified else "BROKEN" if found.problems else "NOT VERIFIED"), found.lines()
    doc, problem = load_shards_file(data_path, dataset=spec, version=os.path.basename(data_path.rstrip("/")))
    if doc is None:
        return "NOT VERIFIED", [problem or f"there is no {artifacts.SHARDS_NAME}: nothing to compare the shards with"]
    info = tfds.builder_from_directory(data_path).info
    recorded, lines = {e["file"]: e for e in doc["shards"]}, []
    for _, split in sorted(info.splits.items()):
        for name, length in zip(split.filenames, split.shard_lengths):
            path, entry = os.path.join(data_path, name), recorded.pop(name, None)
            if remote:
                size = store.size(remote[1].url_of(name)) if name in remote[1].present else None
            else:
                size = tf.io.gfile.stat(path).length if tf.io.gfile.exists(path) else None
            if entry is None:
                lines.append(f"{name}: not in {artifacts.SHARDS_NAME}")
            elif size is None:
                lines.append(f"{name}: missing")
            elif entry.get("num_bytes") not in (None, size) or entry.get("examples") != length:
                lines.append(f"{name}: {size} bytes and {length} examples here, {entry.get('num_bytes')} bytes and "
                             f"{entry.get('examples')} examples in {artifacts.SHARDS_NAME}")
    lines += [f"{name}: in {artifacts.SHARDS_NAME} but not in dataset_info.json" for name in sorted(recorded)]
    return ("BROKEN" if lines else "SIZES MATCH"), lines + [
        f"sizes and example counts only (the shards hold {human_bytes(total_bytes)}, over this page's "
        f"{human_bytes(limits.verify_bytes)} for reading every checksum); the full check: "
        + artifacts.verify_command(spec, data_dir)]


def _sampling(limits: gather.Limits, kind: str) -> str:
    items = [f"Label counts{' and the HRR distribution' if kind == 'fire' else ''} count every record of the shards "
             f"read: all of them when the dataset's shards hold at most {human_bytes(limits.read_bytes)}, else shards "
             "spread evenly over each split (at least one per split), in proportion to its size; the splits table "
             "says how many were read.",
             f"Previews: the split named above the previews, up to {limits.per_class} examples per "
             f"{'experiment' if kind == 'fire' else 'class'} (the first ones in storage order), {limits.max_previews} "
             f"at most, their images under {human_bytes(limits.image_bytes)} in all. Clips show up to "
             f"{media.CLIP_FRAMES} evenly spread frames at most {media.MAX_SIDE} pixels on their longer side."]
    if kind == "volume":
        items.append(f"Intensity histograms: the in-mask voxels of up to {limits.histogram_volumes} volumes per split, "
                     "evenly spread over its read records.")
    items.append(f"Shard check: the full `verify` (every checksum, count and record) up to {human_bytes(limits.verify_bytes)} "
                 "of shards; beyond it, each shard's size and example count against shards.json.")
    return "<ul>" + "".join(f"<li>{esc(i)}</li>" for i in items) + "</ul>"


def write_report(name: str, *, data_dir: str | None = None, out: str | None = None,
                 limits: gather.Limits | None = None) -> str:
    """Writes the report page of a prepared dataset (see the module docstring) and returns its path.

    Args:
      name: `NAME`, `NAME/CONFIG` or `NAME/CONFIG:VERSION` of a dataset prepared in `data_dir`.
      data_dir: the TFDS data_dir it was built into (default: TFDS's, `~/tensorflow_datasets`).
      out: the HTML file to write; default `report.html` in the dataset's version folder, beside the shards.
      limits: what the page samples (`gather.Limits()` by default).

    Returns:
      The path of the page written.
    """
    start = time.perf_counter()
    limits = limits or gather.Limits()
    data_dir = os.fspath(data_dir) if data_dir else tfds.core.constants.DATA_DIR
    remote, fetch = None, None
    if store.is_bucket(data_dir):  # its metadata copied into the reader cache; the sampled shards into its shard cache
        from vidvol.readers import bucket

        data_path, spec, verify_fetch, _ = verify._in_bucket(name, data_dir)
        opened = tfds.builder_from_directory(data_path)
        remote = (verify_fetch, bucket.version_of(opened))
        fetch = lambda paths: bucket.localize(opened, paths)
        out = out or os.path.abspath(f"report-{spec.replace('/', '-')}-{os.path.basename(data_path)}.html")
    else:
        data_dir = os.path.expanduser(data_dir)
        data_path, spec = verify.resolve(name, data_dir)
    if not tf.io.gfile.exists(os.path.join(data_path, verify.DATASET_INFO)):
        base = os.path.join(data_dir, spec.split("/")[0])
        built = sorted(d for d in (os.listdir(base) if os.path.isdir(base) else []) if verify._versions(os.path.join(base, d)))
        raise ValueError(f"{data_path}: no prepared dataset here (no dataset_info.json); build it first, or pass the "
                         "--data_dir it was built into" + (f"; prepared configs there: {built}" if built else ""))
    builder = tfds.builder_from_directory(data_path)
    kind = gather.kind_of(builder.info.features)
    samples, preview_split = gather.read_dataset(builder, limits, fetch)
    skips = gather.read_skips(data_path)
    names = gather.class_names(builder.info.features)
    total = sum(s.num_bytes for s in samples)
    verdict, verify_lines = shard_status(data_path, spec, data_dir, total, limits, remote)
    preview_sample = next((s for s in samples if s.name == preview_split), None)
    previews, image_bytes = _previews(kind, preview_sample, builder, limits)
    sections = [("card", "Card", _card(builder, gather.build_facts(data_path), data_path)),
                ("splits", "Splits", _splits(samples, skips))]
    if names is not None:
        sections.append(("labels", "Label counts", _labels(samples, names)))
    if kind in ("fire", "volume"):
        sections.append(("distribution", "HRR distribution" if kind == "fire" else "Intensity histograms",
                         _distributions(kind, samples)))
    sections.append(("previews", "Previews", previews))
    skip_body = ("<p>No skip report (skip_report.json) in the dataset folder.</p>" if skips is None else
                 skips_html(skips.get("skipped", []), skips.get("empty_splits") or {}))
    sections.append(("skipped", "Skipped inputs", skip_body))
    css = {"OK": "ok", "SIZES MATCH": "ok", "BROKEN": "bad"}.get(verdict, "warn")
    sections.append(("verify", "Shard check", f'<p>Verdict: <span class="{css}">{esc(verdict)}</span></p><pre>'
                     + esc(redact.text("\n".join(verify_lines))) + "</pre>"))
    sections.append(("sampling", "What this page samples", _sampling(limits, kind)))
    now = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    intro = (f"<p>{sum(s.examples for s in samples)} examples in {sum(s.shards for s in samples)} shards "
             f"({esc(human_bytes(total))}); shards: <span class=\"{css}\">{esc(verdict)}</span>. Page written {esc(now)} "
             f"by vidvol {esc(VERSION)} in {{seconds}} s; its images take {esc(human_bytes(image_bytes))}.</p>")
    title = f"{spec} {builder.info.version}"
    html = document(title, intro.replace("{seconds}", f"{time.perf_counter() - start:.1f}"), sections)
    path = os.fspath(out) if out else os.path.join(data_path, REPORT_NAME)
    outputs.write_whole(path, html.encode("utf-8"))
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m vidvol report NAME/CONFIG --data_dir DIR [--out FILE.html]`.

    Args:
      argv: the command's options (default: `sys.argv[1:]` as argparse reads them).

    Returns:
      0 when the page was written, 1 when it could not be (the error names the dataset folder).
    """
    parser = argparse.ArgumentParser(prog="python -m vidvol report", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("dataset", help="NAME, NAME/CONFIG or NAME/CONFIG:VERSION, e.g. hmdb51/split1_20x64x64")
    parser.add_argument("--data_dir", required=True, help="the TFDS data_dir the dataset was built into")
    parser.add_argument("--out", default=None, help=f"the HTML file to write (default: {REPORT_NAME} beside the shards; for a bucket data_dir, report-NAME-CONFIG-VERSION.html in the current folder)")
    defaults = gather.Limits()
    parser.add_argument("--per_class", type=int, default=defaults.per_class, help="examples previewed per class")
    parser.add_argument("--max_previews", type=int, default=defaults.max_previews, help="examples previewed in all")
    parser.add_argument("--read_mib", type=int, default=defaults.read_bytes >> 20,
                        help="MiB of shards read for label counts and distributions (beyond: shards evenly spread)")
    args = parser.parse_args(argv)
    limits = gather.Limits(per_class=args.per_class, max_previews=args.max_previews, read_bytes=args.read_mib << 20)
    tf.get_logger().setLevel("ERROR")  # TF's deprecation notes from inside TFDS's decoders are not the user's
    try:
        path = write_report(args.dataset, data_dir=args.data_dir, out=args.out, limits=limits)
    except (ValueError, OSError, tf.errors.OpError) as e:
        print(redact.text(f"error: {args.dataset} in {args.data_dir}: {type(e).__name__}: {e}"), file=sys.stderr)
        return 1
    print(f"wrote {redact.url(path)} ({human_bytes(os.path.getsize(path)) if os.path.exists(path) else ''})")
    return 0
