"""Which example `vidvol.load` reads at each position: a pure function of the position, so a checkpoint is a position.

Training reads a keyed permutation of the split, new every epoch, evaluation storage order (`Layout`);
the checkpointed state is `index_batches`' counter and keys, about 2 KiB for any dataset
(docs/reading.md, "Order" and "Stopping and resuming").
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import tensorflow as tf

from vidvol.readers import permutation
from vidvol.readers import rng

# Op seed of the per-iterator value: fixed, so every host's pipelines agree on the rotation of an epoch.
ITERATION_SEED = 0x76696476
_FOREVER = 1 << 62


class ShardingError(ValueError):
    """More input pipelines than examples: some pipelines would read nothing."""


@dataclasses.dataclass(frozen=True)
class Layout:
    """One pipeline's share of a split of `examples`: `pipelines` pipelines, this one `pipeline`, training or not.

    A pipeline reads `per_epoch` examples per epoch. Its elements are numbered by a counter that runs
    through the epochs (one pass for `repeat=False`, forever with `repeat=True`); element `i` is
    position `j = i % per_epoch` of epoch `e = i // per_epoch`, and the example there is:

    - training: `(rotation + pipeline * q + permute(j)) mod n`, where `n` is the split's examples,
      `q = n // pipelines` (every pipeline reads q per epoch), `permute` the keyed bijection of
      `readers.permutation` under `rng.example_seed(key, e, pipeline, rng.ORDER)`, and `rotation`
      moves the `n mod pipelines` examples no pipeline reads this epoch along the split epoch by
      epoch, so each is left out as rarely as any other. One pipeline: a fresh uniform shuffle of the
      whole split every epoch.
    - evaluation: pipeline `p` reads its contiguous share of the split in storage order (the first
      `n mod pipelines` pipelines one example more); the others end with one *pad*: their last
      example again, with `valid` False (`load` zeroes its mask and data; weight it 0). No randomness.
    """

    examples: int
    pipelines: int = 1
    pipeline: int = 0
    training: bool = True

    def __post_init__(self):
        if self.examples < 1:
            raise ValueError(f"a split of {self.examples} examples has nothing to read")
        if not 0 <= self.pipeline < self.pipelines:
            raise ValueError(f"input pipeline {self.pipeline} of {self.pipelines}: the id must be in [0, {self.pipelines})")
        if self.pipelines > self.examples:
            raise ShardingError(f"{self.pipelines} input pipelines over {self.examples} examples: "
                                f"{self.pipelines - self.examples} would read nothing; use at most {self.examples}")

    @property
    def share(self) -> int:
        """q: the examples every pipeline reads per epoch in training (n // pipelines)."""
        return self.examples // self.pipelines

    @property
    def left_over(self) -> int:
        """n mod pipelines: left out of each training epoch (training), padded up to at evaluation."""
        return self.examples % self.pipelines

    @property
    def per_epoch(self) -> int:
        """Elements this pipeline yields per epoch (the same on every pipeline; at evaluation pads included)."""
        return self.share + (0 if self.training or not self.left_over else 1)

    @property
    def dropped(self) -> int:
        """Examples of the split no pipeline reads in one training epoch (0 at evaluation)."""
        return self.left_over if self.training else 0

    @property
    def count(self) -> int:
        """Evaluation: the real examples of this pipeline's share."""
        return self.share + (1 if self.pipeline < self.left_over else 0)

    @property
    def start(self) -> int:
        """Evaluation: storage index of this pipeline's first example."""
        return self.pipeline * self.share + min(self.pipeline, self.left_over)

    @property
    def pads(self) -> int:
        """Evaluation: pads at the end of this pipeline's epoch (0 or 1)."""
        return 0 if self.training else self.per_epoch - self.count

    def describe(self) -> str:
        """", pipeline P of N, training" (the part of a checkpoint's fingerprint this layout adds)."""
        return f", pipeline {self.pipeline + 1} of {self.pipelines}, {'training' if self.training else 'evaluation'}"

    # The rule, in NumPy (the reference; random-access readers, tests) and in TensorFlow (`index_batches`).

    def examples_np(self, positions, epoch: int, key: int, rotation: int) -> tuple[np.ndarray, np.ndarray]:
        """(storage index, valid) of `positions` of one epoch, NumPy."""
        j = np.asarray(positions, np.int64)
        n = self.examples
        if not self.training:
            return self.start + np.minimum(j, self.count - 1), j < self.count
        order_seed = rng.seed_np(key, epoch, self.pipeline, rng.ORDER)
        shift = ((int(rotation) + int(epoch)) % n) * self.left_over % n
        index = (shift + self.pipeline * self.share + permutation.permute_np(j, self.share, order_seed)) % n
        return index, np.ones(j.shape, bool)

    def examples_tf(self, element: tf.Tensor, key: tf.Tensor, rotation: tf.Tensor) -> dict[str, tf.Tensor]:
        """The draws of elements `element` (int64 counter values, any shape): storage index, epoch, key, valid."""
        m, n = self.per_epoch, self.examples
        epoch, j = element // m, element % m
        key = tf.broadcast_to(key, tf.shape(element))
        if not self.training:
            index = self.start + tf.minimum(j, self.count - 1)
            valid = j < self.count
        else:
            order_seed = rng.example_seed(key, epoch, self.pipeline, rng.ORDER)
            shift = ((rotation + epoch) % n) * self.left_over % n
            index = (shift + self.pipeline * self.share + permutation.permute(j, self.share, order_seed)) % n
            valid = tf.ones_like(element, tf.bool)
        return {"index": index, "epoch": epoch, "seed": key, "valid": valid}


def stream_seed(draw, stream: int) -> tf.Tensor:
    """The stateless seed of one use of randomness (`rng.CLIP`, `rng.VIDEO_AUGMENT`...) for each draw: [..., 2]."""
    return rng.example_seed(draw["seed"], draw["epoch"], draw["index"], stream)


def iteration_key(seed, per_iterator: tf.Tensor) -> tf.Tensor:
    """The key of one pass: the load's seed mixed with the per-iterator value (int64 scalar).

    Every random choice about an example is drawn from `rng.example_seed(key, e, index, stream)` (its
    clip: `rng.CLIP`; read-time augmentation: `rng.VIDEO_AUGMENT` / `rng.VOLUME_AUGMENT`, via
    `stream_seed`). `key` is this *iteration key*: derived from the `seed` given to `load` (or one
    drawn when it is None) and a per-iterator value, so each `iter(ds)` of a `repeat=False` dataset
    is a new pass (same sequence of passes under the same seed, as tf.data's reshuffling gives).

    Args:
      seed: the load's seed (int).
      per_iterator: the per-iterator value (int64 scalar from `tf.data.Dataset.random`).

    Returns:
      The iteration key, an int64 scalar.
    """
    return rng.example_seed(seed, per_iterator, -1, rng.ORDER)[..., 0]


def _refusal(saved: tf.Tensor, current: str) -> tf.Tensor:
    return tf.strings.join([
        "vidvol.load: this iterator checkpoint was saved reading ", saved, "; this pipeline reads ", current,
        ". The data (or the pipeline layout) changed since it was written, so its position would point at other "
        "examples. Restore the model and optimizer without the iterator (a tf.train.Checkpoint without `iterator`, "
        "restore(...).expect_partial()) and start a new pass over this data; to continue exactly, read the build "
        "and layout the checkpoint was saved with (docs/reading.md, section Stopping and resuming)."])


def index_batches(layout: Layout, batch_size: int, *, drop_remainder: bool, repeat: bool, seed: int,
                  fingerprint: str) -> tf.data.Dataset:
    """Batches of draws (`index`, `epoch`, `seed`, `valid`: [B] each) in the pipeline's order; the checkpointed state.

    What a tf.data iterator checkpoint then holds (`tf.data.Options.experimental_symbolic_checkpoint`:
    no buffered element is saved, each stage recomputes from its input's position): the counter, the
    iteration key and rotation value, and the fingerprint of the data it was reading, about 2 KiB for
    any dataset. Restored into a pipeline made afresh (another process, another `seed=`), the counter
    and keys are the saved ones, so the next batches are those the uninterrupted run would have read;
    a pipeline over other data (a rebuilt dataset, another split or pipeline layout) refuses the
    checkpoint with an error naming both (`tf.errors.InvalidArgumentError` at the first `next()`).

    Args:
      layout: this pipeline's share of the split.
      batch_size: draws per batch.
      drop_remainder: drop the last partial batch of a pass (`repeat=False` only; repeated batches are full).
      repeat: number the elements forever instead of one pass.
      seed: the load's seed (a drawn one when the caller gave None: a restored iterator keeps the
        saved key, so it continues the saved run whatever this is).
      fingerprint: the split's (`records.fingerprint`); the layout's is added. A restored state
        holding another one fails the read.

    Returns:
      A `tf.data.Dataset` of dicts of [B] tensors: `index` (storage index), `epoch`, `seed` (the key), `valid`.
    """
    current = fingerprint + layout.describe()
    # Batches of element numbers: one pass (`range`, the last partial batch as `drop_remainder` says), or
    # forever (every batch full; the scan below numbers them). Per batch, not per element: the state's
    # upkeep is a few ops per batch.
    counter = (tf.data.Dataset.from_tensors(np.int64(0)).repeat() if repeat
               else tf.data.Dataset.range(layout.per_epoch).batch(batch_size, drop_remainder=drop_remainder))
    per_iterator = tf.data.Dataset.random(seed=ITERATION_SEED, rerandomize_each_iteration=True)
    seed = int(seed)
    offsets = tf.range(batch_size, dtype=tf.int64)

    def step(state, element):
        count, started, rotation, key, saved = state
        numbers, value = element
        rotation, key = tf.cond(started, lambda: (rotation, key), lambda: (value, iteration_key(seed, value)))
        if repeat:
            numbers = count + offsets
        same = tf.debugging.Assert(tf.equal(saved, current), [_refusal(saved, current)])
        with tf.control_dependencies([same]):
            numbers = tf.identity(numbers)
        return (count + tf.size(numbers, tf.int64), tf.constant(True), rotation, key, saved), (numbers, rotation, key)

    initial = (tf.constant(0, tf.int64), tf.constant(False), tf.constant(0, tf.int64), tf.constant(0, tf.int64),
               tf.constant(current))
    ds = tf.data.Dataset.zip((counter, per_iterator)).scan(initial, step)
    locate = lambda numbers, rotation, key: layout.examples_tf(numbers, key, rotation)
    return ds.map(tf.autograph.experimental.do_not_convert(locate))


class NotResumableError(ValueError):
    """A pipeline holds a stateful op, whose state an iterator checkpoint does not keep."""


def check_resumable(ds: tf.data.Dataset) -> None:
    """Checks that an iterator checkpoint of `ds` keeps all its state (e.g. your own map after `vidvol.load`).

    `vidvol.load` pipelines checkpoint symbolically (positions, not buffered elements), and under
    symbolic checkpointing TensorFlow does not check for external state when it saves: a stateful
    op's state (`tf.random.uniform`'s generator, a `tf.py_function`'s Python state, a Keras random
    preprocessing layer) is silently left out, and after a restore its draws differ from the
    uninterrupted run's. `vidvol.load`'s own pipeline holds none (its Python reads are stateless
    `tf.numpy_function`s); this runs TensorFlow's own external-state check over the whole pipeline.
    Recipe: docs/reading.md, "Stopping and resuming".

    Args:
      ds: the pipeline to check, as you iterate it (after your own maps).

    Raises:
      NotResumableError: `ds` holds a stateful op (named in the message).
    """
    try:
        ds._as_serialized_graph(  # TF's own check; no public entry point
            external_state_policy=tf.data.experimental.ExternalStatePolicy.FAIL)
    except tf.errors.FailedPreconditionError as e:
        found = re.search(r"(\S+ is stateful)", e.message)
        raise NotResumableError(
            f"this pipeline holds a stateful op ({found.group(1) if found else e.message.strip()}): an iterator "
            "checkpoint would not keep its "
            "state, so after a restore it would not continue as the uninterrupted run. Draw randomness statelessly, "
            "keyed per example (tf.random.stateless_* with a seed from vidvol.readers.rng.example_seed), or accept "
            "that this op's draws differ after a restore") from None


def fresh_seed() -> int:
    """A seed for an unseeded pipeline (its checkpoint keeps the key drawn from it)."""
    return int(np.random.SeedSequence().entropy % (1 << 62))
