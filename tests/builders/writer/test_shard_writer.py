"""The write step's failures: a worker's write error reaches the driver from its message, with what to do."""

from vidvol.builders.writer import shard_writer


def test_a_workers_write_failure_reaches_the_driver_from_its_message():
    error = shard_writer.shard_write_error(OSError(27, "File too large"), "/d/ds/incomplete.X_1.0.0/ds-train.tfrecord-00001-of-00004.partial")
    assert isinstance(error, OSError) and "Cannot write /d/ds/incomplete.X_1.0.0/ds-train" in str(error)
    # What a multi-process runner hands the driver: the worker's traceback as text, inside other errors.
    wrapped = RuntimeError(f"Pipeline failed: Traceback (most recent call last):\n  ...\n{type(error).__name__}: {error} [while running 'WriteShards']")
    try:
        try:
            raise wrapped
        except RuntimeError as e:
            raise KeyError("unrelated") from e
    except KeyError as outer:
        failure = shard_writer.write_failure(outer)
    assert failure == {"path": "/d/ds/incomplete.X_1.0.0/ds-train.tfrecord-00001-of-00004.partial",
                       "error": "OSError: [Errno 27] File too large"}
    assert shard_writer.write_failure(ValueError("no marker")) is None
    assert "file size limit" in shard_writer.write_hint(failure["error"])
    assert "disk or the quota is full" in shard_writer.write_hint("ResourceExhaustedError: /x; No space left on device")
    assert "disk or the quota is full" in shard_writer.write_hint("OSError: [Errno 122] Disk quota exceeded")
    assert "not writable" in shard_writer.write_hint("PermissionDeniedError: /x; Permission denied")
