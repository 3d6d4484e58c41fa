

def test_the_host_calls_run_inside_a_parallel_tf_data_map():
    vol, mask = padded_batch(12)
    spec = dataclasses.replace(EVERYTHING, shift_prob=0.0)
    seeds = rng.example_seed(6, 2, tf.range(12), rng.VOLUME_AUGMENT)
    want = augment.augment_volume(tf.constant(vol), tf.constant(mask), spec, training=True, seeds=seeds)
    ds = tf.data.Dataset.from_tensor_slices((vol, mask, seeds)).batch(4).map(
        lambda v, m, s: augment.augment_volume(v, m, spec, training=True, seeds=s), num_parallel_calls=3)
    got = [np.concatenate(parts) for parts in zip(*[(a.numpy(), b.numpy()) for a, b in ds])]
    assert (got[0] == want[0].numpy()).all() and (got[1] == want[1].numpy()).all()
    frames = np.random.default_rng(0).integers(0, 256, (12, 2, 40, 48, 3), np.uint8)
    video_seeds = rng.example_seed(6, 2, tf.range(12), rng.VIDEO_AUGMENT)
    spec = VideoAugment(crop_size=24, min_size=32, max_size=48)
    want = augment.augment_video(tf.constant(frames), spec, training=True, seeds=video_seeds).numpy()
    ds = tf.data.Dataset.from_tensor_slices((frames, video_seeds)).batch(4).map(
        lambda f, s: augment.augment_video(f, spec, training=True, seeds=s), num_parallel_calls=3)
    assert (np.concatenate([b.numpy() for b in ds]) == want).all()
