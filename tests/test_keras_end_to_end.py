"""The users' use case: `model.fit` on `vidvol.load` batches of each dataset, a tiny Conv3D model each.

Datasets are built by the real Beam pipeline from sample inputs; a couple of training steps must
run without shape errors and give a finite loss, and evaluation must accept the eval batches.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from apache_beam.options.pipeline_options import PipelineOptions

import vidvol
from vidvol.testing import samples

pytestmark = pytest.mark.slow  # trains Keras models end to end: `make test` runs them, `make test-fast` does not

STEPS = 2


def _build(name: str, config: str, manual_dir, data_dir) -> None:
    """Builds `name/config` with the project's Beam writer, in this process."""
    builder = tfds.builder(f"{name}/{config}", data_dir=str(data_dir))
    options = PipelineOptions(["--direct_num_workers=1", "--direct_running_mode=in_memory"])
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(manual_dir=str(manual_dir), beam_options=options)
    )


def _video_model(frames: int, height: int, width: int, outputs: int, per_frame: bool) -> keras.Model:
    """Masked Conv3D: per-frame features, then a clip-level (or per-frame) linear head."""
    video = keras.Input((frames, height, width, 3), name="video")
    mask = keras.Input((frames,), name="mask")
    x = keras.layers.Conv3D(4, 3, strides=(1, 2, 2), padding="same", activation="relu")(video)
    x = keras.layers.TimeDistributed(keras.layers.GlobalAveragePooling2D())(x)  # (T, 4)
    x = x * keras.ops.expand_dims(mask, -1)
    if per_frame:
        y = keras.layers.Reshape((frames,))(keras.layers.Dense(1)(x))
    else:
        pooled = keras.ops.sum(x, axis=1) / keras.ops.maximum(keras.ops.sum(mask, axis=1, keepdims=True), 1.0)
        y = keras.layers.Dense(outputs)(pooled)
    return keras.Model([video, mask], y)


def _volume_model(shape: tuple[int, int, int], outputs: int) -> keras.Model:
    """Masked Conv3D classifier over single-channel volumes."""
    volume = keras.Input(shape, name="volume")
    mask = keras.Input(shape, name="mask")
    x = keras.ops.expand_dims(volume * mask, -1)
    x = keras.layers.Conv3D(4, 3, strides=2, padding="same", activation="relu")(x)
    x = keras.layers.GlobalAveragePooling3D()(x)
    return keras.Model([volume, mask], keras.layers.Dense(outputs)(x))


def _fit(model: keras.Model, train: tf.data.Dataset, loss: str) -> list[float]:
    """A couple of training steps; returns the per-epoch losses."""
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss)
    history = model.fit(train, epochs=2, steps_per_epoch=STEPS, shuffle=False, verbose=0)
    return history.history["loss"]


@pytest.mark.filterwarnings("error:Your input ran out of data:UserWarning")  # evaluate/predict know their steps
def test_hmdb51_trains_from_the_loader(tmp_path):
    samples.write_hmdb51_layout(str(tmp_path / "manual"), videos_per_class=3, num_frames=(12, 30), height=48, width=64, splits=(1,))
    _build("hmdb51", "split1_16x112x112", tmp_path / "manual", tmp_path / "data")
    kw = dict(data_dir=tmp_path / "data", spec=vidvol.ReadSpec(normalize=vidvol.Normalize(resize=(32, 32))))
    train = vidvol.load("hmdb51/split1_16x112x112", "train", 2, seed=0, repeat=True, **kw)
    (video, mask), label = train.element_spec
    assert video.shape == (2, 16, 32, 32, 3) and mask.shape == (2, 16) and label.shape == (2,)
    model = _video_model(16, 32, 32, outputs=51, per_frame=False)
    losses = _fit(model, train, keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    assert len(losses) == 2 and np.all(np.isfinite(losses)) and losses[0] > 0
    test = vidvol.load("hmdb51/split1_16x112x112", "test", 2, **kw)
    result = model.evaluate(test, verbose=0)
    assert np.isfinite(result)
    predictions = model.predict(test, verbose=0)
    labels = vidvol.load_labels("hmdb51/split1_16x112x112", "test", data_dir=tmp_path / "data")
    assert predictions.shape == (len(labels), 51)


def test_fire_hrr_trains_per_frame_regression_from_the_loader(tmp_path):
    samples.write_fire_hrr_frames(str(tmp_path / "manual"), experiments=(("exp_a", 12), ("exp_b", 7)))
    _build("fire_hrr", "161x135x240", tmp_path / "manual", tmp_path / "data")
    train = vidvol.load("fire_hrr/161x135x240", "train", 2, seed=0, repeat=True, data_dir=tmp_path / "data",
                        spec=vidvol.ReadSpec(normalize=vidvol.Normalize(resize=(34, 60))))
    (video, mask), hrr = train.element_spec
    assert video.shape == (2, 161, 34, 60, 3) and mask.shape == (2, 161) and hrr.shape == (2, 161)
    losses = _fit(_video_model(161, 34, 60, outputs=1, per_frame=True), train, "mse")
    assert np.all(np.isfinite(losses)) and losses[0] > 0


def test_mri_volumes_trains_from_the_loader(tmp_path):
    samples.write_mri_volumes(str(tmp_path / "manual"), num_subjects=4, with_split=True)
    _build("mri_volumes", "small_32", tmp_path / "manual", tmp_path / "data")
    train = vidvol.load("mri_volumes/small_32", "train", 2, seed=0, repeat=True, data_dir=tmp_path / "data")
    (volume, mask), label = train.element_spec
    assert volume.shape == (2, 32, 32, 32) and mask.shape == (2, 32, 32, 32) and label.shape == (2,)
    num_classes = tfds.builder("mri_volumes/small_32", data_dir=str(tmp_path / "data")).info.features["label"].num_classes
    model = _volume_model((32, 32, 32), num_classes)
    losses = _fit(model, train, keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    assert np.all(np.isfinite(losses)) and losses[0] > 0
    assert np.isfinite(model.evaluate(vidvol.load("mri_volumes/small_32", "test", 2, data_dir=tmp_path / "data"), verbose=0))


def test_all_frames_clips_train_and_evaluate_with_several_clips(tmp_path):
    clip_length = 8
    samples.write_hmdb51_layout(str(tmp_path / "manual"), videos_per_class=3, num_frames=(6, 24), height=48, width=64, splits=(1,))
    _build("hmdb51", "split1_all_112x112", tmp_path / "manual", tmp_path / "data")
    resize = vidvol.Normalize(resize=(28, 28))
    train = vidvol.load("hmdb51/split1_all_112x112", "train", 2, seed=1, repeat=True, data_dir=tmp_path / "data",
                        spec=vidvol.ReadSpec(clips=vidvol.Clips(length=clip_length, stride=2), normalize=resize))
    model = _video_model(clip_length, 28, 28, outputs=51, per_frame=False)
    losses = _fit(model, train, keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    assert np.all(np.isfinite(losses))
    # Multi-clip evaluation: fold the clip axis into the batch, average the clip logits per video.
    test = vidvol.load("hmdb51/split1_all_112x112", "test", 2, data_dir=tmp_path / "data",
                       spec=vidvol.ReadSpec(clips=vidvol.Clips(length=clip_length, stride=2, eval_clips=3), normalize=resize))
    for (video, mask), label in test.take(1):
        logits = model([tf.reshape(video, (-1, clip_length, 28, 28, 3)), tf.reshape(mask, (-1, clip_length))])
        per_video = tf.reduce_mean(tf.reshape(logits, (-1, 3, 51)), axis=1)
        assert per_video.shape == (label.shape[0], 51) and np.all(np.isfinite(per_video.numpy()))
