"""The peers section's figures from its records: ratios, who wins where, targets, Markdown."""

from __future__ import annotations

from typing import Any

from common import report, section
from peers.jobs import VIDEO_PEERS  # the read-time decoders
LABELS = {"opencv": "OpenCV (sequential grab)", "decord": "decord (get_batch)", "pyav": "PyAV (decode in order)",
          "torchcodec": "TorchCodec (exact seek)", "tfds_video": "TFDS stock tfds.features.Video (tfds.load)",
          "monai_dataset": "MONAI Dataset", "monai_persistent": "MONAI PersistentDataset",
          "monai_cache": "MONAI CacheDataset", "torchio": "TorchIO SubjectsDataset"}
TARGETS = {"video": 15.0, "raw": 30.0, "video_augmented": 12.0, "mri_float32": 4.0, "mri_int16": 8.0, "mri_augment": 3.5}
CONTENDED_CORES = 0.25  # as suite.CONTENDED_CORES


def _ratio(mine: dict[str, Any], peer: dict[str, Any]) -> dict[str, Any]:
    """vidvol's rate over a peer's, wall and cpu-normalized, naming the peer."""
    return {"value": mine["examples_per_s"] / peer["examples_per_s"],
            "cpu": mine["cpu_examples_per_s"] / peer["cpu_examples_per_s"], "against": peer["pipeline"],
            "batch_size": peer["batch_size"]}


def _best(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The fastest row (wall examples/s) among those whose first batch passed the check, or None."""
    ok = [r for r in rows if r.get("check", {}).get("ok")]
    return max(ok, key=lambda r: r["examples_per_s"]) if ok else None


def summarize(doc: dict[str, Any]) -> dict[str, Any]:
    """Per-row ratios (vidvol / peer at the same batch), the best peers, the headline ratios, winners and notes."""
    mine = {r["batch_size"]: r for r in doc["vidvol"]["video"]}
    for r in doc["video"]:
        if r["batch_size"] in mine:
            x = _ratio(mine[r["batch_size"]], r)
            r["vidvol_x"], r["vidvol_x_cpu"] = x["value"], x["cpu"]
    best: dict[str, Any] = {}
    ratios: dict[str, Any] = {}
    for batch in sorted({r["batch_size"] for r in doc["video"]}):
        b = _best([r for r in doc["video"] if r["pipeline"] in VIDEO_PEERS and r["batch_size"] == batch])
        if b:
            best[str(batch)] = {k: b[k] for k in ("pipeline", "examples_per_s", "cpu_examples_per_s")}
            if batch in mine:
                ratios[f"video_b{batch}"] = _ratio(mine[batch], b)
            raw = doc["vidvol"].get("raw")
            if raw and raw["batch_size"] == batch:
                ratios["raw"] = _ratio(raw, b)
            augmented = doc["vidvol"].get("augmented")
            if augmented and augmented["batch_size"] == batch:
                ratios["video_augmented"] = _ratio(augmented, b)
    for r in doc["volume"]:  # plain peer rows against vidvol's float32 + mask, augmented ones against its augmented row
        mine_mri = doc["vidvol"].get("augment" if r["augment"] else "float32")
        if mine_mri:
            x = _ratio(mine_mri, r)
            r["vidvol_x"], r["vidvol_x_cpu"] = x["value"], x["cpu"]
    persistent = {aug: _best([r for r in doc["volume"] if r["pipeline"] == "monai_persistent" and r["augment"] == aug])
                  for aug in (False, True)}
    for mode in ("float32", "int16", "augment"):
        peer = persistent[mode == "augment"]
        if peer and doc["vidvol"].get(mode):
            ratios[f"mri_{mode}"] = _ratio(doc["vidvol"][mode], peer)
    best_volume = {name: {k: b[k] for k in ("pipeline", "examples_per_s", "cpu_examples_per_s")}
                   for name, aug in (("plain", False), ("augmented", True))
                   if (b := _best([r for r in doc["volume"] if r["augment"] == aug]))}
    doc.update(best_video_peer=best, best_volume_peer=best_volume, ratios=ratios)
    doc["winners"] = winners(doc)
    doc["notes"] = notes(doc)
    return doc


def winners(doc: dict[str, Any]) -> list[str]:
    """Which peer wins where, in words (wall rate; the cpu-normalized leader where it differs)."""
    out = []
    for batch, b in doc["best_video_peer"].items():
        rows = [r for r in doc["video"] if r["pipeline"] in VIDEO_PEERS and r["batch_size"] == int(batch)
                and r["check"]["ok"]]
        cpu = max(rows, key=lambda r: r["cpu_examples_per_s"])
        line = (f"Video, batch {batch}: the best read-time peer is **{LABELS[b['pipeline']]}** "
                f"({report.rate(b['examples_per_s'])} clips/s)")
        if cpu["pipeline"] != b["pipeline"]:
            line += f"; cpu-normalized, {LABELS[cpu['pipeline']]} ({report.rate(cpu['cpu_examples_per_s'])})"
        stock = next((r for r in doc["video"] if r["pipeline"] == "tfds_video" and r["batch_size"] == int(batch)), None)
        if stock:
            line += (f"; TFDS's stock Video (decoded at build time, like vidvol) reads "
                     f"{report.rate(stock['examples_per_s'])} "
                     f"clips/s, {report.fmt(stock['examples_per_s'] / b['examples_per_s'], 'x')} that peer")
        out.append(line + ".")
    for name, b in doc["best_volume_peer"].items():
        out.append(f"Volumes, {name}: the best peer is **{LABELS[b['pipeline']]}** ({report.rate(b['examples_per_s'])} "
                   "volumes/s).")
    return out


def notes(doc: dict[str, Any]) -> list[str]:
    """Skipped peers, failed checks, machine contention, quick mode."""
    out = []
    if doc.get("skipped"):
        out.append(doc["skipped"])
    for f in doc.get("failed", []):
        out.append(f"{LABELS[f['pipeline']]} (batch {f['batch_size']}{', augmented' if f.get('augment') else ''}) did "
                   f"not run: {f['error'].strip().splitlines()[-1] if f['error'].strip() else 'no log'} (its log: "
                   f"{f['log']})")
    for r in doc["video"] + doc["volume"]:
        c = r.get("check", {})
        if not c.get("ok", True):
            out.append(f"{LABELS[r['pipeline']]} (batch {r['batch_size']}{', augmented' if r.get('augment') else ''}) "
                       f"failed the first-batch check ({ {k: v for k, v in c.items() if k != 'ok'} }): left out of the "
                       "best peers.")
    rows = doc["video"] + doc["volume"] + doc["vidvol"]["video"] + [
        doc["vidvol"][k] for k in ("raw", "augmented", "float32", "int16", "augment") if doc["vidvol"].get(k)]
    others = max((r["other_cores_busy"] for r in rows), default=0.0)
    if others > CONTENDED_CORES:
        out.append(f"Other processes kept up to {others:.2f} of the {doc['cores']} cores busy during the timed windows: "
                   "wall-clock rates are understated and noisy, the cpu-normalized ratios are steadier.")
    if doc["mode"] == "quick":
        out.append("Quick mode: tiny inputs, one run; it checks the plumbing, not speed.")
    return out


def targets(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """vidvol.load vs the best read-time video peer (float32 per batch, stored raw) and vs MONAI PersistentDataset."""
    r, rows = doc.get("ratios", {}), []
    for key in sorted((k for k in r if k.startswith("video_b")), key=lambda k: r[k]["batch_size"]):
        x = r[key]
        rows.append(section.target(
            f"hmdb51: vidvol.load float32 (batch {x['batch_size']}, seed=0) vs best read-time video peer "
            f"({LABELS[x['against']]})", x["value"], TARGETS["video"], cpu_value=x["cpu"],
            note="the peer decodes the video file at read time (2 DataLoader workers); vidvol decodes 20 stored JPEG "
                 "frames"))
    if "raw" in r:
        x, raw = r["raw"], doc["vidvol"]["raw"]
        rows.append(section.target(
            f"hmdb51 raw ({raw['config']}, batch {x['batch_size']}, unseeded): vidvol.load vs best read-time video peer "
            f"({LABELS[x['against']]})", x["value"], TARGETS["raw"], cpu_value=x["cpu"]))
    if "video_augmented" in r:
        x = r["video_augmented"]
        rows.append(section.target(
            f"hmdb51: vidvol.load float32 with augmentation (batch {x['batch_size']}, seed=0, random resized crop + "
            f"flip) vs best read-time video peer ({LABELS[x['against']]})", x["value"], TARGETS["video_augmented"],
            cpu_value=x["cpu"], note="the peer's plain decode, without the augmentation vidvol's row pays for"))
    m = doc.get("mri", {})
    for dtype, what, note in (
            ("float32", "vidvol.load float32 + mask", "MONAI hands out the volume alone (no mask), from float32 tensors it "
             "cached on disk, decoded once"),
            ("int16", "vidvol.load(output_dtype='int16', mask_dtype=None)", "int16 volumes as stored, dequantized on the "
             "device"),
            ("augment", "vidvol.load float32 + mask with augmentation (patches, flip, rot90, scale, shift)",
             "the same Rand* set on both sides; vidvol reads the patch's rows only and moves the mask with the patch, "
             "MONAI crops its cached float32 volume (no mask)")):
        if f"mri_{dtype}" in r:
            x = r[f"mri_{dtype}"]
            against = "MONAI PersistentDataset" + (" with its Rand* augmentation" if dtype == "augment" else "")
            rows.append(section.target(
                f"{m.get('key', 'mri_volumes')}: {what} (batch {x['batch_size']}) vs {against}",
                x["value"], TARGETS[f"mri_{dtype}"], cpu_value=x["cpu"], note=note))
    return rows


def _check(r: dict[str, Any]) -> str:
    """The check column: correlation with vidvol's stored example (and with the next frames), or why not."""
    c = r.get("check")
    if not c:
        return ""
    if "corr" not in c:
        return ("ok" if c["ok"] else "**failed**") + f" ({c.get('frames', '')})"
    shifted = f", next frames {c['shifted_corr']:.3f}" if "shifted_corr" in c else ""
    return ("ok" if c["ok"] else "**failed**") + f" (r={c['corr']:.3f}{shifted})"


def _row(label: str, r: dict[str, Any], *cells: str) -> list[str]:
    """A table row of a read row's figures."""
    return [label, str(r["batch_size"]), report.rate(r["examples_per_s"]),
            ", ".join(report.rate(x) for x in r.get("examples_per_s_runs", [])), report.rate(r["cpu_examples_per_s"]),
            f"{r['cores_used']:.2f} ({r['other_cores_busy']:.2f})", f"{r.get('peak_rss_mib', 0):.0f}", *cells]


def _x(r: dict[str, Any]) -> str:
    """vidvol / this row, wall (cpu-normalized)."""
    return f"{report.fmt(r['vidvol_x'], 'x')} ({report.fmt(r['vidvol_x_cpu'], 'x')})" if "vidvol_x" in r else ""


HEAD = ["pipeline", "batch", "examples/s", "runs", "cpu examples/s", "cores busy (others)", "peak RSS MiB"]


def markdown(doc: dict[str, Any]) -> list[str]:
    """The section in RESULTS.md: targets, video and volume tables with ratios, winners, versions, notes, method."""
    out = ["## Peers: vidvol beside the tools users know", "",
           f"`benchmarks/sections/peers.py` ({doc['mode']} mode, {doc.get('duration_s', 0) / 60:.1f} min, {doc['cores']} cores): "
           f"the same files, frames, output sizes and batch sizes as vidvol's rows. Peers venv: `{doc['venv']}`.", ""]
    if doc.get("skipped"):
        out += [f"**{doc['skipped']}**", ""]
    if doc["targets"]:
        out += report.targets_table(doc["targets"]) + report.misses(doc["targets"])
    else:
        out += ["No target rows: they compare vidvol with the read-time peers, which this run did not measure.", ""]
    out += [f"### Video: hmdb51 split-1 train ({doc['clips']} clips), 20 frames -> 64x64 float32", ""]
    rows = [_row(f"vidvol.load float32 (`{r['config']}`, seed=0)", r, "", "") for r in doc["vidvol"]["video"]]
    if doc["vidvol"].get("raw"):
        raw = doc["vidvol"]["raw"]
        rows.append(_row(f"vidvol.load float32 (`{raw['config']}`, stored raw, unseeded)", raw, "", ""))
    if doc["vidvol"].get("augmented"):
        aug = doc["vidvol"]["augmented"]
        rows.append(_row(f"vidvol.load float32 (`{aug['config']}`, seed=0), {aug['augment']}", aug, "", ""))
    rows += [_row(LABELS[r["pipeline"]], r, _check(r), _x(r))
             for r in sorted(doc["video"], key=lambda r: (r["batch_size"], r["pipeline"] != "tfds_video"))]
    out += report.table(HEAD + ["first batch vs vidvol's stored frames", "vidvol.load float32 / this (cpu)"], rows)
    out += [f"- {line}" for line in doc.get("winners", []) if line.startswith("Video")] + [""]
    if doc["volume"] or doc["vidvol"].get("float32"):
        m = doc["mri"]
        out += [f"### Volumes: {m['key']} train ({doc.get('volumes', '?')} volumes), {m['size']}^3", ""]
        what = {"float32": "float32 + mask", "int16": "(output_dtype='int16', mask_dtype=None)",
                "augment": "float32 + mask + augmentation"}
        rows = [_row(f"vidvol.load {what[d]} (`{m['config']}`)", doc["vidvol"][d], "", "")
                for d in ("float32", "int16", "augment") if doc["vidvol"].get(d)]
        rows += [_row(LABELS[r["pipeline"]] + (" + augmentation" if r["augment"] else ""), r, _check(r), _x(r),
                      report.opt(r.get("setup_s"), "{:.1f} s")) for r in doc["volume"]]
        out += report.table(HEAD + ["first batch vs vidvol's stored volume",
                                    "vidvol.load / this (cpu): float32 + mask, augmented vs augmented", "cache fill"],
                            [row + [""] * (10 - len(row)) for row in rows])
        out += [f"- {line}" for line in doc.get("winners", []) if line.startswith("Volumes")]
        if doc["vidvol"].get("augment"):
            out += ["- Augmented rows: the same Rand* set on both sides (patches of 3/4 of the side, flip, quarter turn, "
                    "intensity scale and shift); vidvol's keeps the mask with the patch."]
        else:
            out += ["- Augmented peer rows have no vidvol row beside them in this document (measured before vidvol "
                    "augmented)."]
        out += [""]
    v = doc.get("versions", {})
    if v:
        libs = {**v.get("peers_venv", {}), "tensorflow-datasets": v.get("tensorflow-datasets")}
        out += ["Versions: " + ", ".join(f"{k} {val}" for k, val in libs.items() if val) + "."]
        if v.get("ffmpeg"):
            out += ["FFmpeg: " + "; ".join(f"{LABELS[k]}: {val}" for k, val in v["ffmpeg"].items()) + "."]
        out += [""]
    out += [f"- {line}" for line in doc.get("notes", []) + doc.get("method", [])] + [""]
    return out
