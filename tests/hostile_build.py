"""Builds video_folder over a manual_dir in this process, as `build_in_process` does, and writes what came out as JSON.

    python tests/hostile_build.py MANUAL_DIR DATA_DIR RESULT_JSON CONFIG [CONFIG ...]

Run as a child of the test, so that its peak RSS (and its decoding children's) is the build's own.
Per config: the splits' examples (video_id, label, num_frames, frames stored, mask sum), the skip
report's skips, the label names; then the process's and its reaped children's peak RSS.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorflow_datasets as tfds

from conftest import in_process_config
from peak_memory import TreeSampler, peak_rss_mib
from vidvol.builders import isolation
from vidvol.builders.writer import skip_report
from vidvol.datasets.video_folder import video_folder_dataset_builder as vfb


def build(manual_dir: str, data_dir: str, config: str) -> dict:
    """One in-process build of `config`; its examples, skips and label names."""
    builder = vfb.Builder(data_dir=data_dir, config=config)
    builder.download_and_prepare(download_config=in_process_config(manual_dir=manual_dir))
    label = builder.info.features["label"]
    examples = []
    for split in builder.info.splits:
        for ex in tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False)):
            examples.append({
                "video_id": ex["video_id"].decode("utf-8"), "label": label.int2str(ex["label"]), "split": split,
                "num_frames": int(ex["num_frames"]), "stored": int(ex["video"].shape[0]), "mask": int(ex["mask"].sum()),
            })
    report = skip_report.read_skip_report(builder.data_dir)
    return {"examples": examples, "skipped": report["skipped"], "label_names": label.names}


def main() -> None:
    manual_dir, data_dir, result_path, *configs = sys.argv[1:]
    with TreeSampler(interval=0.02) as tree:
        result = {config: build(manual_dir, os.path.join(data_dir, config), config) for config in configs}
        tree.sweep()  # the decoding children still alive, read exactly before they end
    isolation._end_all()
    result["peak_rss_mib"] = peak_rss_mib()  # VmHWM: this build's own, not the pytest worker's (see peak_memory)
    result["children_peak_rss_mib"] = tree.descendant_peak_mib()
    with open(result_path, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
