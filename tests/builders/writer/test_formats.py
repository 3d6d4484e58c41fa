"""What a build may write, checked before anything is: the file format (ArrayRecord only locally) and the data_dir."""

import pytest
import tensorflow_datasets as tfds

from vidvol.builders.writer import formats


def test_array_record_needs_a_local_data_dir():
    assert formats.check_file_format(None) is tfds.core.FileFormat.TFRECORD
    assert formats.check_file_format("tfrecord", "gs://bucket/data") is tfds.core.FileFormat.TFRECORD
    assert formats.check_file_format("array_record", "/tmp/data") is tfds.core.FileFormat.ARRAY_RECORD
    with pytest.raises(ValueError, match=r"gs://bucket/data: ArrayRecord files are written and read as local files only"):
        formats.check_file_format("array_record", "gs://bucket/data")
    with pytest.raises(ValueError, match="not a valid FileFormat"):
        formats.check_file_format("csv")


def test_check_data_dir_refuses_s3_and_names_what_works():
    for ok in (None, "/tmp/out", "relative/out", "gs://bucket/tfds", "hdfs://nn/tfds"):
        formats.check_data_dir(ok)
    with pytest.raises(ValueError) as err:
        formats.check_data_dir("s3://bucket/tfds")
    text = str(err.value)
    assert "s3://bucket/tfds" in text and "tf.io.gfile" in text
    assert "manual_dir may be a bucket" in text and "gs:// / hdfs://" in text
