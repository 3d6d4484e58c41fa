"""What every vidvol reader reads and hands out, as values: `ReadSpec(clips, normalize, output, augment)`, and `Tuning`.

`vidvol.load`, `grain_dataset`, `torch_dataset`, `SupervisedExamples.make` and `data_source` take
the same `spec=ReadSpec(...)`, checked here the same way for every reader (a bad value is a
`ValueError` naming the field and the choices); a reader that cannot honour a part says so
(`ReadSpec.check_supported`). The spec is what comes out; `Tuning` is how fast.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np

from vidvol.readers import bucket
from vidvol.readers import clip_sampling
from vidvol.readers.augment_video import VideoAugment
from vidvol.readers import output
from vidvol.readers.augment_volume import VolumeAugment
from vidvol.readers.shard_order import ShardOrder


def _positive_int(owner: str, name: str, value: Any, *, optional: bool = False) -> None:
    """ValueError unless `value` is an integer >= 1 (or None when `optional`)."""
    if optional and value is None:
        return
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
        choice = "None or an integer >= 1" if optional else "an integer >= 1"
        raise ValueError(f"{owner}.{name} must be {choice}, got {value!r}")


def _names(owner: str, name: str, value: Any) -> tuple[str, ...] | None:
    """None, or feature names as a tuple (one name may be given as a string)."""
    if value is None:
        return None
    names = (value,) if isinstance(value, str) else tuple(value) if isinstance(value, Sequence) else None
    if not names or not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"{owner}.{name} must be None, a feature name or a non-empty sequence of them, got {value!r}")
    return names


def _per_channel(owner: str, name: str, value: Any) -> float | tuple[float, ...]:
    """A finite number, or one per channel (a non-empty sequence), as float / tuple of floats."""
    try:
        values = output.per_channel(value) if np.ndim(value) <= 1 else None
    except (TypeError, ValueError):
        values = None
    flat = values if isinstance(values, tuple) else (values,)
    if values is None or not flat or not all(math.isfinite(v) for v in flat):
        raise ValueError(f"{owner}.{name} must be a finite number or one per channel, got {value!r}")
    return values


@dataclasses.dataclass(frozen=True)
class Clips:
    """Read-time clips: `length` stored frames, `stride` apart; at evaluation `eval_clips` evenly spaced ones.

    Counted in stored frames, not seconds (pytorchvideo's samplers take seconds because they decode
    by time; a vidvol example is already a frame sequence at the config's rate). Training draws one
    uniformly placed clip (`clip_sampling`).

    Args:
      length: frames per clip; None (the default: whole examples, as tfds.load reads them; vidvol's
        fixed-length configs are clips already, where DMVR always samples `num_frames`) reads every
        stored frame of a fixed-length config; an `all_*` config (a variable number of frames) needs a length.
      stride: stored frames between a clip's frames (DMVR's name); default 1. Needs `length`.
      eval_clips: evenly spaced clips per example at evaluation (DMVR's `num_test_clips`, keeping
        vidvol's earlier name); >1 stacks the clips after the batch axis. Default 1. Needs `length`.

    Raises:
      ValueError: a field is not an integer >= 1 (`length`: or None), or `stride`/`eval_clips` are set
        without `length`.
    """

    length: int | None = None
    stride: int = 1
    eval_clips: int = 1

    def __post_init__(self):
        _positive_int("Clips", "length", self.length, optional=True)
        _positive_int("Clips", "stride", self.stride)
        _positive_int("Clips", "eval_clips", self.eval_clips)
        if self.length is None and (self.stride, self.eval_clips) != (1, 1):
            raise ValueError(f"Clips.stride and Clips.eval_clips apply to clips of Clips.length frames, which is None "
                             f"(every stored frame); set length too, got {self!r}")

    def window(self) -> clip_sampling.ClipWindow | None:
        """The clip rule `clip_sampling` runs (None: no clips, every stored frame)."""
        if self.length is None:
            return None
        return clip_sampling.ClipWindow(int(self.length), int(self.stride), int(self.eval_clips))


@dataclasses.dataclass(frozen=True)
class Normalize:
    """How frames become model-ready floats: scaled to [0, 1], then `(x - mean) / std`, then resized.

    The defaults keep frames in [0, 1] (what `tfds.load` gives, over 255), since the right
    statistics depend on the model (DMVR's `zero_centering_image` and torchvision's `Normalize` leave
    the choice to the caller too). `resize` lives here, not in `Output`, because it is the same kind
    of step as mean/std: host float work on frames that an integer `Output.dtype` leaves to the
    device, so "an integer dtype takes `Normalize()`" is one rule; and augmentation
    (`ReadSpec.augment`: crops of the uint8 frames) runs before all of it.

    Args:
      mean: subtracted from the [0, 1] frames: a number or one per channel; default 0.
      std: divides them afterwards: a non-zero number or one per channel; default 1.
      resize: `(height, width)`, bilinear, on the normalized floats; None (default): as stored.

    Raises:
      ValueError: a non-finite or zero-`std` value, `mean` and `std` with different channel counts, or
        a `resize` other than two integers >= 1.
    """

    mean: float | tuple[float, ...] = 0.0
    std: float | tuple[float, ...] = 1.0
    resize: tuple[int, int] | None = None

    def __post_init__(self):
        object.__setattr__(self, "mean", _per_channel("Normalize", "mean", self.mean))
        std = _per_channel("Normalize", "std", self.std)
        if any(s == 0 for s in (std if isinstance(std, tuple) else (std,))):
            raise ValueError(f"Normalize.std must be non-zero (a number or one per channel), got {self.std!r}")
        object.__setattr__(self, "std", std)
        if isinstance(self.mean, tuple) and isinstance(std, tuple) and len(self.mean) != len(std):
            raise ValueError(f"Normalize.mean and Normalize.std must have as many channels, got {self.mean!r} and {std!r}")
        if self.resize is not None:
            size = tuple(self.resize) if not isinstance(self.resize, (str, bytes)) and np.ndim(self.resize) == 1 else ()
            if len(size) != 2:
                raise ValueError(f"Normalize.resize must be None or (height, width), got {self.resize!r}")
            for d in size:
                _positive_int("Normalize", "resize", d)
            object.__setattr__(self, "resize", tuple(int(d) for d in size))


@dataclasses.dataclass(frozen=True)
class Output:
    """What comes out and in which dtype and structure.

    Args:
      dtype: frames and volumes: "float32" (default: what Keras layers and DMVR's outputs take),
        "bfloat16", "float16", or the stored integers ("uint8" frames, "int16" MRI volumes) to
        dequantize on the device (`vidvol.dequantize_params`); names, or the matching tf/np dtypes.
      mask_dtype: the `mask` input of the supervised tuple: "float32" (default: multiplies float
        activations as is), "bfloat16", "float16", "uint8" or "bool"; None leaves it out (data
        without padding).
      features: dicts of just these features instead of the tuple (`tfds.load`'s default output,
        restricted); then `inputs`/`target` and `mask_dtype` do not apply (setting them is a ValueError).
      inputs: override the builder's supervised inputs (`tfds.load(as_supervised=True)`'s structure,
        plus the mask); one name or a sequence.
      target: override the builder's supervised target (one feature name).

    Raises:
      ValueError: an unknown dtype, an empty or non-string name, or `features` together with
        `inputs`, `target` or a non-default `mask_dtype`.
    """

    dtype: str = "float32"
    mask_dtype: str | None = "float32"
    features: tuple[str, ...] | None = None
    inputs: tuple[str, ...] | None = None
    target: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "dtype", output.output_dtype_name(self.dtype, "Output.dtype"))
        object.__setattr__(self, "mask_dtype", output.mask_dtype_name(self.mask_dtype, "Output.mask_dtype"))
        object.__setattr__(self, "features", _names("Output", "features", self.features))
        object.__setattr__(self, "inputs", _names("Output", "inputs", self.inputs))
        if self.target is not None and not (isinstance(self.target, str) and self.target):
            raise ValueError(f"Output.target must be None or one feature name, got {self.target!r}")
        if self.features is not None:
            if self.inputs is not None or self.target is not None:
                raise ValueError("Output.features returns dicts, Output.inputs/target shape the supervised tuple: "
                                 f"set one or the other, got {self!r}")
            if self.mask_dtype != "float32":
                raise ValueError("Output.mask_dtype applies to the supervised tuple's mask input; dicts "
                                 f"(Output.features) keep masks as stored, got {self!r}")


_PARTS = {"clips": Clips, "normalize": Normalize, "output": Output}


@dataclasses.dataclass(frozen=True)
class ReadSpec:
    """The options every reader shares: which clips, how frames are normalized, what comes out, how it is augmented.

    Defaults read every stored frame, frames float32 in [0, 1], the supervised `((x, mask), y)`
    tuple, as `vidvol.load(name, split, batch_size)` always has, and augment nothing.

    The parts are what the peers keep apart too: a DMVR factory takes the sampling and
    normalization in `configure()` (`num_frames`, `stride`, `num_test_clips`,
    `zero_centering_image`), apart from `make_dataset()`'s reader arguments and `tune()`'s speed;
    pytorchvideo's `LabeledVideoDataset` a clip sampler object and a transform; `tfds.load` its
    output options (`as_supervised`, `decoders`) beside its read options (`read_config`). The spec
    is what comes out (it changes the tensors); `Tuning` is how fast (it never does), so a spec can
    be compared and stored with an experiment while the tuning follows the machine. Augmentation is
    the `augment` part, a frozen dataclass like the others but None by default: `VideoAugment` crops
    and flips the uint8 frames before `normalize` (`readers.augment_video`), `VolumeAugment` takes
    MONAI's `Rand*` transforms to volumes (`readers.augment_volume`); iteration state belongs to the
    readers, not here.

    Args:
      clips: the read-time clips (`vidvol.Clips`); default `Clips()`: every stored frame.
      normalize: the frame normalization and resize (`vidvol.Normalize`); default `Normalize()`.
      output: dtype, mask dtype and structure of what comes out (`vidvol.Output`); default `Output()`.
      augment: None (default: nothing augmented); `vidvol.VideoAugment(...)`: crops and flips of the
        uint8 frames, before `normalize`; `vidvol.VolumeAugment(...)`: patches, flips, rotations and
        intensity of volumes.
      order: the training order. None (default): every epoch a uniform permutation of the whole
        split. `vidvol.ShardOrder(block=...)`: every epoch reads the shards in a seeded order, in
        blocks of `block` shards whose examples are mixed (`readers.shard_order`): from a bucket each
        shard is one sequential download. Either order is the same on local disk and in a bucket;
        evaluation reads storage order under both.

    Raises:
      ValueError: a part of the wrong type, or parts that contradict each other: an integer
        `Output.dtype` with a non-default `Normalize` (mean/std: pass them to
        `vidvol.dequantize_params`; resize: on the device) or with `VolumeAugment`'s intensity
        scale/shift.
    """

    clips: Clips = Clips()
    normalize: Normalize = Normalize()
    output: Output = Output()
    augment: VideoAugment | VolumeAugment | None = None
    order: ShardOrder | None = None

    def __post_init__(self):
        if self.order is not None and not isinstance(self.order, ShardOrder):
            raise ValueError(f"ReadSpec.order must be None (a uniform permutation of the split each epoch) or a "
                             f"vidvol.ShardOrder(block=...), got {self.order!r}")
        for name, cls in _PARTS.items():
            value = getattr(self, name)
            if not isinstance(value, cls):
                raise ValueError(f"ReadSpec.{name} must be a vidvol.{cls.__name__}, got {value!r}")
        if self.augment is not None and not isinstance(self.augment, (VideoAugment, VolumeAugment)):
            raise ValueError(f"ReadSpec.augment must be None, a vidvol.VideoAugment or a vidvol.VolumeAugment, "
                             f"got {self.augment!r}")
        if isinstance(self.augment, VolumeAugment) and self.augment.changes_values and (
                self.output.dtype in output.INTEGER_DTYPES):
            raise ValueError(
                f"VolumeAugment's intensity scale/shift gives values that Output.dtype={self.output.dtype!r} cannot "
                "hold; use a float Output.dtype, or keep the spatial transforms only (patches, flips, rotations) and "
                "scale/shift on the device")
        if self.output.dtype in output.INTEGER_DTYPES:
            if self.normalize.resize is not None:
                raise ValueError(
                    f"Output.dtype={self.output.dtype!r} returns frames as stored, and resizing would round them; "
                    "resize on the device after dequantizing (e.g. keras.layers.Resizing after "
                    "vidvol.layers.Dequantize), or use a float Output.dtype")
            if self.normalize != Normalize():
                raise ValueError(
                    f"Output.dtype={self.output.dtype!r} returns frames as stored and applies no mean/std on the host; "
                    "pass mean= and std= to vidvol.dequantize_params(...) instead, whose scale and offset include them")

    def changed(self) -> tuple[str, ...]:
        """The fields set away from their defaults, as "part.field" ("clips.length", "output.dtype"; "augment" and
        "order" when set)."""
        out = []
        for name, cls in _PARTS.items():
            part, default = getattr(self, name), cls()
            out += [f"{name}.{f.name}" for f in dataclasses.fields(cls) if getattr(part, f.name) != getattr(default, f.name)]
        return (tuple(out) + (("augment",) if self.augment is not None else ())
                + (("order",) if self.order is not None else ()))

    def check_supported(self, reader: str, supported: Collection[str], why: str) -> None:
        """ValueError naming the fields `reader` cannot honour (those changed and not in `supported`)."""
        refused = [f for f in self.changed() if f not in supported and f.split(".")[0] not in supported]
        if refused:
            raise ValueError(f"{reader} cannot honour spec {', '.join(refused)} ({why}); it takes "
                             f"{', '.join(sorted(supported)) or 'the default ReadSpec()'}")


@dataclasses.dataclass(frozen=True)
class Tuning:
    """Performance knobs of a `vidvol.load` pipeline; none changes which examples come out, only speed and memory.

    Kept out of `ReadSpec` for that reason (as `tfds.ReadConfig` is out of `tfds.load`'s output
    options and DMVR's `tune()` out of its builders): the same spec reads alike everywhere.

    Args:
      cycle_length: batches read (and parsed, decoded) at once; None: autotuned. (It counted shard
        files read in parallel when files were interleaved; examples are now read by index.)
      memory_budget_bytes: cap for tf.data's autotuned buffers and the lean-mode threshold; None: a
        quarter of physical memory, at most 16 GiB.
      deterministic: keep element order in parallel stages; None: True. False lets a slow batch be
        overtaken (the order then depends on timing, and an iterator restored from a checkpoint may
        repeat or skip a few batches: `readers.order`).
      parse_per_batch: when every feature read has a fixed stored shape and nothing runs per example,
        parse each batch of serialized records in one call (same values and, under a seed, the same
        order as TFDS's per-example parse); default True. False parses each record with TFDS's decoders.
      direct_reads: for volumes (MRI) in local TFRecord shards read per batch, read each volume's stored
        bytes straight from the file into the batch (`readers.tfdata.direct_volumes`: indexed once, CRC32C
        checked; same tensors and order); default True. False: whole records, parsed with TFDS's specs.
      cache_limit: for a dataset in a bucket, bytes of local disk for whole shards (int, or text such as
        "20GB"): each shard is downloaded on first use, checked, and the least recently used evicted past
        the limit (`readers.bucket`). None: `VIDVOL_CACHE_LIMIT`, else no cache (records by ranged GET).
      stream_window: under `ReadSpec(order=ShardOrder(...))` from a bucket without a cache, bytes of memory
        the read may hold beyond a local read's (int, or text such as "2GiB"): whole shards (the block being
        read and the next ones, fetched ahead) and a fixed reserve for the store client
        (`readers.tfdata.shard_window.STORE_RESERVE`, 32 MiB). At least the `block` largest shards and the
        reserve (a smaller one is refused, naming that size); None: two blocks' largest shards and the reserve.

    Raises:
      ValueError: `cycle_length` or `memory_budget_bytes` not None or an integer >= 1, a flag not a bool, or a
        `stream_window` of no bytes.
    """

    cycle_length: int | None = None
    memory_budget_bytes: int | None = None
    deterministic: bool | None = None
    parse_per_batch: bool = True
    direct_reads: bool = True
    cache_limit: int | str | None = None
    stream_window: int | str | None = None

    def __post_init__(self):
        if self.stream_window is not None:
            window = bucket.parse_limit(self.stream_window, "Tuning.stream_window")
            if window is None:
                raise ValueError(f"Tuning.stream_window must be None or a number of bytes >= 1, got "
                                 f"{self.stream_window!r}")
            object.__setattr__(self, "stream_window", window)
        _positive_int("Tuning", "cycle_length", self.cycle_length, optional=True)
        _positive_int("Tuning", "memory_budget_bytes", self.memory_budget_bytes, optional=True)
        if self.cache_limit is not None:
            bucket.parse_limit(self.cache_limit, "Tuning.cache_limit")
        for name in ("deterministic", "parse_per_batch", "direct_reads"):
            value = getattr(self, name)
            if not (isinstance(value, bool) or (name == "deterministic" and value is None)):
                choices = "None, True or False" if name == "deterministic" else "True or False"
                raise ValueError(f"Tuning.{name} must be {choices}, got {value!r}")


def check_batch_size(batch_size: int) -> None:
    """ValueError unless `batch_size` is an integer >= 1 (every reader's batch rule)."""
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
