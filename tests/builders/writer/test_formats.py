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


def test_tfds_rooted_data_dirs_refuse_buckets_and_name_the_vidvol_command():
    for ok in (None, "/tmp/out", "relative/out", "gs://bucket/tfds"):
        formats.check_data_dir(ok)
    for url in ("s3://bucket/tfds", "hdfs://nn/tfds"):  # neither has a tf.io.gfile file system in this TensorFlow
        with pytest.raises(ValueError) as err:
            formats.check_data_dir(url)
        text = str(err.value)
        assert url in text and "tf.io.gfile" in text and "python -m vidvol build" in text and "push" in text


def test_python_m_vidvol_build_takes_any_fsspec_bucket_and_names_an_unknown_scheme():
    formats.check_data_dir("s3://bucket/tfds", bucket_ok=True)
    formats.check_data_dir("memory://tfds", bucket_ok=True)
    with pytest.raises(ValueError, match="fsspec has no nosuchfs:// file system"):
        formats.check_data_dir("nosuchfs://bucket/tfds", bucket_ok=True)
