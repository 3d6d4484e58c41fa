"""A custom Keras training loop on `vidvol.load` that checkpoints model, optimizer and iterator every few steps.

`python training_run.py DATA_PATH CKPT_DIR LOG STEPS EVERY [STOP_AFTER]`: restores the latest checkpoint
in CKPT_DIR if there is one, then trains until STEPS steps are done, saving (`tf.train.CheckpointManager`)
every EVERY steps. Each step appends `step id id ...` (the examples of its batch) to LOG, flushed to
disk. With STOP_AFTER, after that step it prints "waiting" and sleeps (for the test to SIGKILL it:
a crash mid-epoch, after the last checkpoint). The environment's `PIPELINES="N,p"` makes it input pipeline p of
N (`input_context`) and `GLOBAL_BATCH` the global batch (default 2; each pipeline reads GLOBAL_BATCH // N).
"""

from __future__ import annotations

import os
import sys
import time

import keras
import tensorflow as tf
import tensorflow_datasets as tfds

import vidvol


def main(data_path: str, ckpt_dir: str, log: str, steps: int, every: int, stop_after: int | None) -> None:
    builder = tfds.builder_from_directory(data_path)
    spec = vidvol.ReadSpec(clips=vidvol.Clips(length=4), output=vidvol.Output(features=["video", "label", "video_id"]))
    pipelines, pipeline = (int(v) for v in os.environ.get("PIPELINES", "1,0").split(","))
    context = tf.distribute.InputContext(pipelines, pipeline) if pipelines > 1 else None
    batch = int(os.environ.get("GLOBAL_BATCH", "2")) // pipelines
    ds = vidvol.load(builder, "train", batch, seed=7, spec=spec, repeat=True, input_context=context)
    it = iter(ds)
    classes = builder.info.features["label"].num_classes
    model = keras.Sequential([keras.layers.Input((4, 64, 64, 3)), keras.layers.GlobalAveragePooling3D(),
                              keras.layers.Dense(classes)])
    optimizer = keras.optimizers.SGD(0.1)
    step = tf.Variable(0, dtype=tf.int64)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, iterator=it, step=step)
    manager = tf.train.CheckpointManager(checkpoint, ckpt_dir, max_to_keep=3)
    if manager.latest_checkpoint:
        checkpoint.restore(manager.latest_checkpoint).assert_existing_objects_matched()
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(video, label):
        with tf.GradientTape() as tape:
            loss = loss_fn(label, model(video, training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    with open(log, "a", encoding="utf-8") as out:
        while int(step) < steps:
            batch = next(it)
            train_step(batch["video"], batch["label"])
            step.assign_add(1)
            out.write(" ".join([str(int(step))] + [v.decode() for v in batch["video_id"].numpy()]) + "\n")
            out.flush()
            os.fsync(out.fileno())
            if int(step) % every == 0:
                manager.save(checkpoint_number=int(step))
            if stop_after is not None and int(step) == stop_after:
                print("waiting", flush=True)
                while True:
                    time.sleep(1)
    print("done", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    main(args[0], args[1], args[2], int(args[3]), int(args[4]), int(args[5]) if len(args) > 5 else None)
