"""The dummy-data builder tests again, with the builder writing ArrayRecord shards (`file_format="array_record"`).

`ArrayRecordBuilderTest` goes before a dataset's `tfds.testing.DatasetBuilderTestCase` subclass:
the same TFDS checks (registration, info, the build over dummy_data, counts after a reload), but
the builder is made with `file_format="array_record"` and every split is read back by index, since
tf.data has no ArrayRecord reader (TFDS's `as_dataset` refuses it): through TFDS's own data source
(`builder.as_data_source`) and `vidvol.data_source`, which must agree example for example and give
every feature its declared shape and dtype. JPEG frames are checked against `tf.io.decode_jpeg` of the
stored frames too (the pixels of `tfds.load` and `vidvol.load`): `VideoFrames` decodes them in TFDS's
NumPy path the same way (`core.jpeg`), so `tfds.data_source` gives them as well.
"""

from __future__ import annotations

import itertools
import os

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds
from tensorflow_datasets.testing import dataset_builder_testing

import vidvol
from vidvol import readers


class ArrayRecordBuilderTest:
    """Mixin for a DatasetBuilderTestCase subclass: build ArrayRecord shards, read them back by index."""

    FILE_FORMAT = "array_record"

    def _make_builder(self, config=None):
        return self.dataset_class(
            data_dir=self.tmp_dir, config=config, version=self.VERSION, file_format=self.FILE_FORMAT
        )

    def _assertAsDataset(self, builder):  # TFDS's hook name
        self.assertEqual(builder.info.file_format, tfds.core.FileFormat.ARRAY_RECORD)
        files = os.listdir(os.fspath(builder.data_path))
        self.assertTrue([f for f in files if ".array_record-" in f])
        self.assertFalse([f for f in files if ".tfrecord-" in f])
        features = builder.info.features
        hashes = {}
        for split, expected in self.SPLITS.items():
            tfds_source = builder.as_data_source(split)
            ours = vidvol.data_source(builder, split)
            stored = readers.random_access.data_source.DataSource(builder, split, decode_frames=False)
            self.assertLen(ours, expected)
            self.assertLen(tfds_source, expected)
            examples = ours.__getitems__(list(range(len(ours))))
            for index, example in enumerate(examples):
                theirs = tfds_source[index]
                self.assertEqual(set(example), set(features))
                for name, feature in features.items():
                    value = np.asarray(example[name])
                    if np.dtype(feature.np_dtype).kind not in "SUO":
                        self.assertEqual(value.dtype, np.dtype(feature.np_dtype), name)
                        self.assertEqual(len(value.shape), len(feature.shape), name)
                        for got, want in zip(value.shape, feature.shape):
                            self.assertTrue(want is None or got == want, f"{name}: {value.shape} vs {feature.shape}")
                    # TFDS's data source gives sequences as lists of frames: the same values, stacked.
                    their = theirs[name]
                    their = np.stack(their) if isinstance(their, list) and their else their
                    their = np.asarray(their).reshape(value.shape)
                    if readers.frames.is_encoded_video(feature) and feature.feature.encoding_format == "jpeg":
                        encoded = stored[index][name]
                        want = np.stack([tf.io.decode_jpeg(f, channels=value.shape[-1]).numpy() for f in encoded])
                        np.testing.assert_array_equal(value, want.reshape(value.shape), err_msg=name)
                        np.testing.assert_array_equal(their, value, err_msg=f"{name}: tfds.data_source vs tfds.load")
                        continue
                    np.testing.assert_array_equal(value, their, err_msg=name)
            hashes[split] = {dataset_builder_testing.checksum(ex) for ex in examples}
        for (a, ha), (b, hb) in itertools.combinations(hashes.items(), 2):
            self.assertFalse(ha & hb, f"splits {a!r} and {b!r} share examples")


def array_record_records(data_path: str) -> dict[str, list[bytes]]:
    """Every ArrayRecord shard of a prepared dataset, named as its TFRecord twin would be, records in file order.

    Read with ArrayRecord's own reader, so a build's shards compare byte for byte with a TFRecord
    build's (`tf.data.TFRecordDataset`) of the same inputs.
    """
    from array_record.python import array_record_module

    out = {}
    for name in sorted(os.listdir(data_path)):
        if ".array_record-" in name:
            reader = array_record_module.ArrayRecordReader(os.path.join(data_path, name))
            out[name.replace(".array_record-", ".tfrecord-")] = list(reader.read_all())
            reader.close()
    return out
