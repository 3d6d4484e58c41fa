"""Which example `vidvol.load` reads at each position: a pure function of the position, so a checkpoint is a position.

Every epoch is one global order of the split (a keyed permutation in training, storage order at
evaluation); pipeline p of P reads its positions p, p + P, p + 2P... (`Layout`). The checkpointed
state is `index_batches`' global position in that order, its key and what it checks at a restore
(docs/reading.md, "Order" and "Stopping and resuming").
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import tensorflow as tf

from vidvol.readers import permutation
from vidvol.readers import rng
from vidvol.readers import shard_order

# Op seed of the per-iterator value of one unsharded pipeline (`index_batches`): a new pass per iterator.
ITERATION_SEED = 0x76696476
# The seed of pipelines over input pipelines given none: every host must compute the same order.
SHARED_SEED = 0


class ShardingError(ValueError):
    """More input pipelines than examples: some pipelines would read nothing."""


@dataclasses.dataclass(frozen=True)
class Layout:
    """One pipeline's share of a split of `examples`: `pipelines` pipelines, this one `pipeline`, training or not.

    Epoch `e` is one global order of the split: position `t` holds example `permute(t)` in training
    (`readers.permutation`'s keyed bijection under `rng.example_seed(key, e, 0, rng.ORDER)`: a fresh
    uniform shuffle of the whole split every epoch), example `t` at evaluation (storage order).
    With `blocks` (`ReadSpec(order=ShardOrder(...))`), training epoch `e` is instead the
    shard-streaming order of `shard_order.ShardBlocks` under the same key: positions, frontier and
    shares are as below, only the example at each position differs.
    Pipeline `p` reads the positions `t = g + k * pipelines + p` (k = 0, 1, ...) from the epoch's
    *frontier* `g` (0 at the start of an epoch): the pipelines read the order round-robin, so after
    every pipeline read k examples the frontier is `g + k * pipelines` whatever the layout, and a
    restore into another number of pipelines continues from it (`index_batches`).

    - training: each pipeline reads `(n - g) // pipelines` of the epoch (n the split's examples);
      the `(n - g) mod pipelines` last positions (at most pipelines - 1 examples, random ones: the
      order's tail) are left out of that epoch.
    - evaluation: each pipeline reads `ceil((n - g) / pipelines)`; positions at or past n are *pads*:
      the last example again, with `valid` False (`load` zeroes its mask and data; weight it 0).
    """

    examples: int
    pipelines: int = 1
    pipeline: int = 0
    training: bool = True
    blocks: shard_order.ShardBlocks | None = None  # training's shard-streaming order; None: the whole-split one

    def __post_init__(self):
        if self.blocks is not None and self.blocks.examples != self.examples:
            raise ValueError(f"a shard-streaming order over {self.blocks.examples} examples for a split of {self.examples}")
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
        return self.elements(0)

    def elements(self, frontier):
        """Elements each pipeline reads of an epoch from the global position `frontier` on (int, array or tensor)."""
        n, p = self.examples, self.pipelines
        lib = tf.math if isinstance(frontier, tf.Tensor) else np
        rest = n - frontier if self.training else n - frontier + p - 1
        return lib.maximum(rest, 0) // p

    @property
    def dropped(self) -> int:
        """Examples of the split no pipeline reads in one training epoch (0 at evaluation)."""
        return self.left_over if self.training else 0

    @property
    def count(self) -> int:
        """Evaluation: the real examples of this pipeline's epoch."""
        return self.share + (1 if self.pipeline < self.left_over else 0)

    @property
    def pads(self) -> int:
        """Evaluation: pads at the end of this pipeline's epoch (0 or 1)."""
        return 0 if self.training else self.per_epoch - self.count

    @property
    def streams(self) -> bool:
        """Whether epochs follow the shard-streaming order (training with `blocks`; evaluation is storage order)."""
        return self.training and self.blocks is not None

    def describe(self) -> str:
        """", training" or ", evaluation" (and the shard-streaming order, when it is one): the part of a
        checkpoint's data check the layout adds (not its pipelines)."""
        return f", {'training' if self.training else 'evaluation'}" + (self.blocks.describe() if self.streams else "")

    # The rule, in NumPy (the reference; random-access readers, tests) and in TensorFlow (`index_batches`).

    def examples_np(self, positions, epoch: int, key: int, frontier: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """(storage index, valid) of this pipeline's elements `positions` (k) of `epoch` from `frontier`, NumPy."""
        t = int(frontier) + np.asarray(positions, np.int64) * self.pipelines + self.pipeline
        n = self.examples
        if not self.training:
            return np.minimum(t, n - 1), t < n
        if self.streams:
            return self.blocks.index_np(t, epoch, key), np.ones(t.shape, bool)
        return permutation.permute_np(t, n, rng.seed_np(key, epoch, 0, rng.ORDER)), np.ones(t.shape, bool)

    def locate_tf(self, k: tf.Tensor, epoch: tf.Tensor, frontier: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """(epoch, global position) of this pipeline's elements `k` (int64 vector) from `(epoch, frontier)` on.

        Elements past the end of the epoch run on into the next ones (each from frontier 0).
        """
        left, m = self.elements(frontier), self.per_epoch
        first = k < left
        r = tf.maximum(k - left, 0)
        epochs = tf.where(first, epoch, epoch + 1 + r // m)
        return epochs, tf.where(first, frontier + k * self.pipelines, (r % m) * self.pipelines) + self.pipeline

    def advance(self, epoch: int, frontier: int, read: int) -> tuple[int, int]:
        """`advance_tf` in Python ints: the (epoch, frontier) after every pipeline read `read` more elements."""
        left, m = int(self.elements(frontier)), self.per_epoch
        if read < left:
            return epoch, frontier + read * self.pipelines
        r = read - left
        return epoch + 1 + r // m, (r % m) * self.pipelines

    def advance_tf(self, epoch: tf.Tensor, frontier: tf.Tensor, read: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """The (epoch, frontier) after every pipeline read `read` more elements from `(epoch, frontier)`."""
        left, m = self.elements(frontier), self.per_epoch
        r = tf.maximum(read - left, 0)
        within = read < left
        return (tf.where(within, epoch, epoch + 1 + r // m),
                tf.where(within, frontier + read * self.pipelines, (r % m) * self.pipelines))

    def examples_tf(self, epoch: tf.Tensor, t: tf.Tensor, key: tf.Tensor) -> dict[str, tf.Tensor]:
        """The draws at global positions `t` of epochs `epoch` (int64, one shape): storage index, epoch, key, valid."""
        n = self.examples
        key = tf.broadcast_to(key, tf.shape(t))
        if not self.training:
            index, valid = tf.minimum(t, n - 1), t < n
        elif self.streams:  # NumPy's rule, run as one stateless call per batch (the same integers everywhere)
            index = tf.numpy_function(self.blocks.index_np, [t, epoch, key], tf.int64, stateful=False,
                                      name="vidvol_shard_order")
            index = tf.ensure_shape(index, t.shape)
            valid = tf.ones_like(t, tf.bool)
        else:
            index = permutation.permute(t, n, rng.example_seed(key, epoch, 0, rng.ORDER))
            valid = tf.ones_like(t, tf.bool)
        return {"index": index, "epoch": epoch, "seed": key, "valid": valid}


def stream_seed(draw, stream: int) -> tf.Tensor:
    """The stateless seed of one use of randomness (`rng.CLIP`, `rng.VIDEO_AUGMENT`...) for each draw: [..., 2]."""
    return rng.example_seed(draw["seed"], draw["epoch"], draw["index"], stream)


def iteration_key(seed, per_iterator) -> tf.Tensor:
    """The key of one pass: the load's seed mixed with a per-iterator value (int64 scalar).

    Every random choice about an example is drawn from `rng.example_seed(key, e, index, stream)` (its
    place in the order: `rng.ORDER`; its clip: `rng.CLIP`; read-time augmentation:
    `rng.VIDEO_AUGMENT` / `rng.VOLUME_AUGMENT`, via `stream_seed`). Over input pipelines (or with an
    `epoch` given) the per-iterator value is 0, so every host and every iterator computes the same
    key from the seed alone; one unsharded pipeline takes a value from `tf.data.Dataset.random`,
    new for each `iter(ds)` of a `repeat=False` dataset (a new pass; the same sequence of passes
    under the same seed, as tf.data's reshuffling gives).

    Args:
      seed: the load's seed (int).
      per_iterator: the per-iterator value (int64 scalar).

    Returns:
      The iteration key, an int64 scalar.
    """
    return rng.example_seed(seed, per_iterator, -1, rng.ORDER)[..., 0]


_RESTORE_HELP = (" Restore the model and optimizer without the iterator (a tf.train.Checkpoint without `iterator`, "
                 "restore(...).expect_partial()) and start a new pass over this data; to continue exactly, read ")


def _refusal(saved: tf.Tensor, current: str) -> tf.Tensor:
    return tf.strings.join([
        "vidvol.load: this iterator checkpoint was saved reading ", saved, "; this pipeline reads ", current,
        ". The data (or its order: ReadSpec.order) changed since it was written, so its position would point at "
        "other examples.", _RESTORE_HELP,
        "the build and ReadSpec.order the checkpoint was saved with (docs/reading.md, section Stopping and resuming)."])


def _batch_refusal(saved_batch: tf.Tensor, saved_pipelines: tf.Tensor, batch: int, pipelines: int) -> tf.Tensor:
    s = tf.strings.as_string
    return tf.strings.join([
        "vidvol.load: this iterator checkpoint was saved with a global batch of ", s(saved_batch), " (",
        s(saved_batch // saved_pipelines), " per pipeline x ", s(saved_pipelines), " pipelines); this pipeline reads ",
        f"{batch * pipelines} ({batch} per pipeline x {pipelines} pipelines). A checkpoint restores into any number of "
        "pipelines whose global batch (per-pipeline batch x pipelines) is the saved one: pass batch_size=",
        s(saved_batch), f" // {pipelines} (vidvol.distribute: global_batch_size=", s(saved_batch), ").",
        _RESTORE_HELP, "it with the saved global batch (docs/reading.md, section Stopping and resuming)."])


def index_batches(layout: Layout, batch_size: int, *, drop_remainder: bool, repeat: bool, seed: int,
                  fingerprint: str, epoch: int | None = None) -> tf.data.Dataset:
    """Batches of draws (`index`, `epoch`, `seed`, `valid`: [B] each) in the pipeline's order; the checkpointed state.

    What a tf.data iterator checkpoint then holds (`tf.data.Options.experimental_symbolic_checkpoint`:
    no buffered element is saved, each stage recomputes from its input's position): the epoch and the
    global frontier (`Layout`), the iteration key, the global batch and pipelines it was saved with,
    and the fingerprint of the data it was reading, about 2 KiB for any dataset. Restored into a
    pipeline made afresh (another process, another `seed=`, another pipeline of any number of
    pipelines), the key and frontier are the saved ones, so over the pipelines the next batches read
    the rest of the saved epoch. Every batch (and the end of a pass: this stage always runs once more)
    first checks the restored state: other data, training against evaluation, or another global batch
    (`batch_size * pipelines`) is a `tf.errors.InvalidArgumentError` naming both, at the first `next()`.

    Args:
      layout: this pipeline's share of the split.
      batch_size: draws per batch.
      drop_remainder: drop the last partial batch of a pass (`repeat=False` only; repeated batches are full).
      repeat: read epoch after epoch forever instead of one pass.
      seed: the load's seed (a drawn one when the caller gave None: a restored iterator keeps the
        saved key, so it continues the saved run whatever this is).
      fingerprint: the split's (`records.fingerprint`); the layout's training/evaluation is added. A
        restored state holding another one fails the read.
      epoch: the epoch a new iterator starts at (its pass's epoch under `repeat=False`). None: 0, and
        for one pipeline a new pass per `iter(ds)` (`iteration_key`); over input pipelines the
        iterators of every host then read epoch 0.

    Returns:
      A `tf.data.Dataset` of dicts of [B] tensors: `index` (storage index), `epoch`, `seed` (the key), `valid`.
    """
    current = fingerprint + layout.describe()
    pipelines, global_batch = layout.pipelines, batch_size * layout.pipelines
    explicit = epoch is not None or pipelines > 1
    first_epoch = np.int64(epoch or 0)
    if first_epoch < 0:
        raise ValueError(f"epoch={epoch}: epochs count from 0")
    # An endless ticker (each step one batch; a `repeat=False` pass ends where the state says, after the
    # checks ran, so an iterator restored at or past the end still checks), with a per-iterator value
    # that only one unsharded pipeline without an epoch takes up (the same stages either way, so a
    # checkpoint of one restores into the other).
    ticker = tf.data.Dataset.random(seed=ITERATION_SEED, rerandomize_each_iteration=True)
    seed = int(seed)
    offsets = tf.range(batch_size, dtype=tf.int64)

    def step(state, value):
        started, e, g, key, saved, saved_batch, saved_pipelines = state
        fresh = lambda: (first_epoch, np.int64(0), iteration_key(seed, np.int64(0) if explicit else value),
                         tf.constant(current), np.int64(global_batch), np.int64(pipelines))
        e, g, key, saved, saved_batch, saved_pipelines = tf.cond(
            started, lambda: (e, g, key, saved, saved_batch, saved_pipelines), fresh)
        same_data = tf.debugging.Assert(tf.equal(saved, current), [_refusal(saved, current)])
        with tf.control_dependencies([same_data]):
            same_batch = tf.debugging.Assert(tf.equal(saved_batch, global_batch),
                                             [_batch_refusal(saved_batch, saved_pipelines, batch_size, pipelines)])
        with tf.control_dependencies([same_batch]):
            e = tf.identity(e)
        left = layout.elements(g)
        if repeat:
            numbers, done = offsets, tf.constant(False)
        elif drop_remainder:
            done = left < batch_size
            numbers = offsets
        else:
            done = left <= 0
            numbers = tf.range(tf.minimum(left, batch_size), dtype=tf.int64)
        read = tf.where(done, np.int64(0), tf.size(numbers, tf.int64))
        # One pass stops at the end of its epoch; a repeated read runs on into the next.
        e2, g2 = layout.advance_tf(e, g, read) if repeat else (e, g + read * pipelines)
        state = (tf.constant(True), e2, g2, key, saved, saved_batch, np.int64(pipelines))
        return state, (numbers, e, g, key, done)

    initial = (tf.constant(False), np.int64(0), np.int64(0), np.int64(0), tf.constant(current), np.int64(global_batch),
               np.int64(pipelines))
    ds = ticker.scan(initial, tf.autograph.experimental.do_not_convert(step))  # plain TF ops: no autograph pass
    if not repeat:
        ds = ds.take_while(tf.autograph.experimental.do_not_convert(lambda numbers, e, g, key, done: ~done))
    locate = lambda numbers, e, g, key, done: layout.examples_tf(*layout.locate_tf(numbers, e, g), key)
    ds = ds.map(tf.autograph.experimental.do_not_convert(locate))
    if not repeat:
        # The batches of one pass: the same count for every number of pipelines with this global batch.
        per_epoch = layout.per_epoch
        batches = per_epoch // batch_size if drop_remainder else -(-per_epoch // batch_size)
        ds = ds.apply(tf.data.experimental.assert_cardinality(batches))
    return ds


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
