"""What a read pipeline reads and decides, before it reads anything.

`ExamplePlan`: the features read, the videos decoded, the clip window, where frames decode and their
augmentation (shared by `vidvol.load` and the random-access readers). `plan_load`: every decision of one `vidvol.load`
pipeline (output structure, per-batch parse, direct volume reads, lean mode, buffer sizes,
parallelism), from the builder's info, a few facts of the split (`SplitFacts`) and the spec, so
`load` itself is its stages and the decisions can be tested on builder infos without data.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import tensorflow as tf
import tensorflow_datasets as tfds

from vidvol.readers import bucket
from vidvol.readers import augment_video
from vidvol.readers import augment_volume
from vidvol.readers import order
from vidvol.readers import shard_order
from vidvol.readers.shard_order import ShardOrder
from vidvol.readers import output
from vidvol.readers import shards
from vidvol.readers.dataset import is_training, supervised_keys
from vidvol.readers.example_plan import ExamplePlan
from vidvol.readers.tfdata import sizing
from vidvol.readers.tfdata.batch_parser import BatchParser
from vidvol.readers.spec import Normalize, ReadSpec, Tuning, check_batch_size

AUTOTUNE = tf.data.AUTOTUNE


def output_names(
    info: tfds.core.DatasetInfo, features: Sequence[str] | None, inputs: str | Sequence[str] | None, target: str | None
) -> tuple[tuple[str, ...], tuple[str, ...] | None, str | None]:
    """(features read, input names or None for dict output, target name or None)."""
    if features is not None:
        names = tuple(features)
        unknown = [n for n in names if n not in info.features]
        if unknown:
            raise ValueError(f"{info.full_name}: unknown features {unknown}; expected some of {sorted(info.features)}")
        return names, None, None
    in_names, tgt = supervised_keys(info, inputs, target)
    return tuple(dict.fromkeys(in_names + (tgt,))), in_names, tgt


# ----------------------------------------------------------------------------------------------
# The decisions of one `vidvol.load` pipeline


@dataclasses.dataclass(frozen=True)
class SplitFacts:
    """What a plan needs of a split: its name, the examples it takes from each shard file (TFDS's order), bytes per example."""

    name: str
    shard_examples: tuple[int, ...]
    example_bytes: float  # stored (serialized) bytes per example: num_bytes / num_examples

    @classmethod
    def of(cls, builder: tfds.core.DatasetBuilder, split: str) -> SplitFacts:
        """The facts of `split` of a prepared builder (a missing or empty split: an error naming it)."""
        instructions = shards.file_instructions(builder, split)
        info = builder.info.splits[split]
        return cls(split, tuple(int(f.take) for f in instructions), info.num_bytes / max(1, info.num_examples))

    @property
    def examples(self) -> int:
        return sum(self.shard_examples)


def layout_of(split: SplitFacts, training: bool, input_context: tf.distribute.InputContext | None,
              order_option: ShardOrder | None = None, where: str = "") -> order.Layout:
    """This pipeline's share of the split (`readers.order`): balanced by examples over the input pipelines.

    `order_option`: `ReadSpec.order` (a `ShardOrder` is checked against the split's shards here).
    """
    pipelines, pipeline = (1, 0) if input_context is None else (int(input_context.num_input_pipelines),
                                                                int(input_context.input_pipeline_id))
    blocks = shard_order.blocks_of(order_option, split.shard_examples, f"{where}split {split.name!r}")
    try:
        return order.Layout(split.examples, pipelines, pipeline, training, blocks)
    except order.ShardingError as e:
        raise order.ShardingError(f"split {split.name!r}: {e}") from None


@dataclasses.dataclass(frozen=True)
class LoadPlan:
    """Everything one `vidvol.load` pipeline decided before reading: what, in which structure, how, how big."""

    info: tfds.core.DatasetInfo
    split: SplitFacts
    spec: ReadSpec
    read: ExamplePlan  # the features read, the clip window, where frames decode (per batch unless lean)
    inputs: tuple[str, ...] | None  # the supervised inputs; None: dicts of `read.names`
    target: str | None
    omit_mask: bool  # Output(mask_dtype=None): the mask input is checked full, then left out
    training: bool
    seed: int | None
    batch_size: int
    drop_remainder: bool
    deterministic: bool
    parser: BatchParser | None  # one parse per batch of serialized records; None: TFDS's per-example parse
    augment: augment_volume.VolumePlan | None  # volume augmentation (the mask read as boxes, which follow the patches)
    direct_reads: bool  # try reading volumes straight from the shard files (`direct_volumes`; falls back itself)
    lean: bool  # lean memory mode: a few float batches would not fit the memory budget
    layout: order.Layout  # this pipeline's share of the split per epoch
    read_parallelism: int  # batches read (and parsed, decoded) at once; AUTOTUNE unless Tuning.cycle_length
    memory_budget: int
    decode_parallelism: int  # examples decoded at once per example (AUTOTUNE unless lean)
    float_batch_bytes: int  # one output batch as float32
    cache_limit: int | None = None  # bytes of the bucket shard cache (`readers.bucket`); None: ranged GETs
    threadpool_size: int | None = None  # the pipeline's own tf.data thread pool (bucket reads); None: the shared one

    @property
    def static_batch(self) -> int | None:
        """The batch size when every batch has it (drop_remainder), else None."""
        return self.batch_size if self.drop_remainder else None

    @property
    def examples(self) -> int:
        """Examples (and evaluation pads) this pipeline reads per epoch."""
        return self.layout.per_epoch

    @property
    def files(self) -> int:
        """Shard files of the split (every pipeline may read any of them)."""
        return len(self.split.shard_examples)

    @property
    def random_clips(self) -> bool:
        """Whether each example draws a random clip (training with clips): from `rng.CLIP` of its draw."""
        return self.training and self.read.clip is not None

    @property
    def pads(self) -> bool:
        """Whether evaluation batches may hold pads (evaluation over pipelines that do not divide the split)."""
        return not self.training and self.layout.left_over > 0

    @property
    def mask_dtype(self) -> tf.DType | None:
        """The mask input's dtype (None: left out)."""
        name = self.spec.output.mask_dtype
        return None if name is None else tf.as_dtype(name)

    def options(self) -> tf.data.Options:
        """The pipeline's tf.data options: order, RAM budget, symbolic checkpoints, and in lean mode no rewrite that
        keeps extra batches.

        Symbolic checkpointing: an iterator checkpoint holds each stage's position, not its buffered
        elements (`readers.order`). Lean mode turns off map fusion, map parallelization and injected
        prefetches: each would keep another float batch alive.
        """
        options = tf.data.Options()
        options.deterministic = self.deterministic
        options.autotune.ram_budget = int(self.memory_budget)
        options.experimental_symbolic_checkpoint = True
        if self.threadpool_size:
            options.threading.private_threadpool_size = int(self.threadpool_size)
        if self.lean:
            options.experimental_optimization.apply_default_optimizations = False
            options.experimental_optimization.map_parallelization = False
            options.experimental_optimization.inject_prefetch = False
        return options

    def describe(self, direct: bool) -> str:
        """The log line of the pipeline (`direct`: whether direct volume reads were taken)."""
        layout = self.layout
        parse = ("batch, direct volume reads" if direct else "batch") if self.parser is not None else "example"
        decode = "per batch" if self.read.decode_in_batch else f"per example, parallelism {self.decode_parallelism}"
        share = (f"pipeline {layout.pipeline + 1} of {layout.pipelines}: {self.examples} examples per epoch"
                 + (f" ({layout.dropped} of the split left out per epoch)" if layout.dropped else "")
                 + (f" (incl. {layout.pads} pad)" if layout.pads else ""))
        shuffle = "whole-split permutation per epoch" if self.training else "storage order"
        return (f"{self.info.full_name} {self.split.name}: {self.split.examples} examples in {self.files} files, "
                f"{share}, order: {shuffle}, parse per {parse}, decode {decode}, batch {self.batch_size} "
                f"({self.float_batch_bytes / 2**20:.0f} MiB as float32){', lean memory mode' if self.lean else ''}"
                f"{', augmented ' + str(self.spec.augment) if self.read.augments else ''}"
                f"{', training' if self.training else ''}")


def has_mask_output(info: tfds.core.DatasetInfo, names: Sequence[str], inputs: Sequence[str] | None,
                    omit_mask: bool) -> bool:
    """Whether the output carries the `mask` feature (where evaluation pads are marked)."""
    if inputs is not None:
        return output.MASK in inputs and not omit_mask
    return output.MASK in names


def plan_load(
    info: tfds.core.DatasetInfo,
    split: SplitFacts,
    batch_size: int,
    *,
    spec: ReadSpec,
    tuning: Tuning,
    training: bool | None = None,
    seed: int | None = None,
    drop_remainder: bool | None = None,
    input_context: tf.distribute.InputContext | None = None,
) -> LoadPlan:
    """The decisions of `vidvol.load(...)` over a dataset with `info` and a split with `split`'s facts; reads nothing.

    `training` None: True for splits whose name starts with "train"; `drop_remainder` None: `training`.
    Raises what `load` raises for arguments that do not fit the dataset (unknown features, clips
    without a video, all-frames configs without clips, a left-out only input, more pipelines than
    examples, evaluation pads without a mask to mark them).
    """
    check_batch_size(batch_size)
    training = is_training(split.name, training)
    drop_remainder = training if drop_remainder is None else drop_remainder
    deterministic = True if tuning.deterministic is None else tuning.deterministic
    out = spec.output

    # What comes out: the features read, in which structure and dtype.
    names, inputs, target = output_names(info, out.features, out.inputs, out.target)
    output.check_output_dtype(info, names, out.dtype)
    omit_mask = out.mask_dtype is None and inputs is not None and output.MASK in inputs
    if omit_mask and len(inputs) == 1:
        raise ValueError(f"{info.full_name}: Output(mask_dtype=None) leaves the mask out, and it is the only input; "
                         "pass Output(mask_dtype='uint8') (or another dtype), or other Output.inputs")
    video_augment = spec.augment if isinstance(spec.augment, augment_video.VideoAugment) else None
    read = ExamplePlan.make(info, names, spec.clips.window(), training, batch_size if drop_remainder else None,
                         video_augment)
    if spec.normalize != Normalize() and not read.videos:
        raise ValueError(f"{info.full_name}: Normalize (mean, std, resize) applies to video frames, and none of "
                         f"{list(names)} is one; use Normalize() (volumes come out as stored)")
    mask_dtype = None if out.mask_dtype is None else tf.as_dtype(out.mask_dtype)
    mask_input = inputs is not None and output.MASK in inputs
    augment = None
    if isinstance(spec.augment, augment_volume.VolumeAugment):
        # The mask comes out as the supervised input's dtype (its boxes when left out), or as stored (uint8) in dicts.
        augment = augment_volume.plan_for(info, names, spec.augment, training,
                                          mask_dtype=mask_dtype if mask_input else tf.uint8)
    # Augmented volumes decode as float32 (int16 output: as stored) and reach the output dtype after the transforms.
    volume_dtype = out.dtype if augment is None or out.dtype == "int16" else "float32"
    read = read.with_decoders(output.feature_decoders(
        info, names, volume_dtype, mask_dtype, decode_mask=mask_input,
        mask_boxes=augment is not None and augment.mask is not None))

    # How much this pipeline reads per epoch, and how big its buffers may be.
    layout = layout_of(split, training, input_context, spec.order, f"{info.full_name} ")
    if not training and layout.left_over and not has_mask_output(info, names, inputs, omit_mask):
        raise ValueError(
            f"{info.full_name} split {split.name!r}: {split.examples} examples over {layout.pipelines} evaluation "
            f"pipelines leave {layout.pipelines - layout.left_over} pipelines one example short, which they pad "
            "(so every pipeline yields as many batches) with an example whose mask is all zeros; this output has no "
            "mask to mark it. Keep the mask (Output(mask_dtype=...), or 'mask' in Output.features), or evaluate "
            "with a number of pipelines that divides the split")
    budget = tuning.memory_budget_bytes or sizing.default_memory_budget()
    float_batch_bytes = read.float_bytes(spec.normalize.resize) * batch_size
    lean = sizing.is_lean(float_batch_bytes, budget)
    if lean:
        read = dataclasses.replace(read, decode_in_batch=False)

    # How: one parse per batch where every feature has a fixed shape and nothing runs per example first.
    parser = (BatchParser.for_features(info.features, read.names, read.videos, read.feature_decoders)
              if tuning.parse_per_batch and not read.needs_example_map else None)
    return LoadPlan(
        info=info, split=split, spec=spec, read=read, inputs=inputs, target=target, omit_mask=omit_mask,
        training=training, seed=seed, batch_size=batch_size, drop_remainder=drop_remainder, deterministic=deterministic,
        parser=parser, augment=augment,
        direct_reads=tuning.direct_reads and parser is not None and not read.videos and not lean,
        lean=lean, layout=layout, read_parallelism=tuning.cycle_length or AUTOTUNE, memory_budget=budget,
        decode_parallelism=sizing.lean_decode_parallelism(read.decoded_bytes(), budget) if lean else AUTOTUNE,
        float_batch_bytes=float_batch_bytes, cache_limit=bucket.cache_limit(tuning.cache_limit),
    )
