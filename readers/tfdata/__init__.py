"""The `tf.data` reader: `vidvol.load` and its plan, stages, record reads, parsers and decoders."""
