"""Tests for vidvol.builders.transforms.video and .frame_ops on real AVI/MP4/JPEG/PNG files written with OpenCV."""

from __future__ import annotations

import os
import pathlib
import shutil

import cv2
import numpy as np
import pytest

import hostile_videos
from vidvol.builders.transforms import clips
from vidvol.builders.transforms import frame_ops
from vidvol.builders.transforms import video

HEIGHT, WIDTH = 72, 96  # pattern videos: a 2 x 3 grid of 36 x 32 blocks
NUM_FRAMES = 40
FPS = 25.0
CODECS = [("XVID", "avi"), ("mp4v", "mp4")]


def _write_video(path: pathlib.Path, frames_bgr: list[np.ndarray], fourcc: str, fps: float = FPS) -> pathlib.Path:
    """Write BGR frames with cv2.VideoWriter and check the writer really produced a file."""
    height, width = frames_bgr[0].shape[:2]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*fourcc), fps, (width, height))
    assert writer.isOpened(), f"OpenCV cannot write {fourcc} to {path}"
    for frame in frames_bgr:
        writer.write(frame)
    writer.release()
    assert path.stat().st_size > 0
    return path


def _pattern(index: int) -> np.ndarray:
    """Frame whose six black/white blocks spell ``index`` in binary (robust to lossy codecs)."""
    frame = np.zeros((HEIGHT, WIDTH, 3), np.uint8)
    for bit in range(6):
        if (index >> bit) & 1:
            row, col = divmod(bit, 3)
            frame[row * 36 : (row + 1) * 36, col * 32 : (col + 1) * 32] = 255
    return frame


def _read_pattern(frame: np.ndarray) -> int:
    """Recover the index written by ``_pattern`` from a decoded (HEIGHT, WIDTH) frame."""
    gray = frame.mean(axis=2)
    value = 0
    for bit in range(6):
        row, col = divmod(bit, 3)
        if gray[row * 36 + 6 : (row + 1) * 36 - 6, col * 32 + 6 : (col + 1) * 32 - 6].mean() > 128:
            value |= 1 << bit
    return value


def _marker_box(frame: np.ndarray) -> tuple[int, int, float, float]:
    """Height, width and centre (row, col) of the bright marker in a frame."""
    bright = frame.mean(axis=2) > 128
    rows = np.flatnonzero(bright.any(axis=1))
    cols = np.flatnonzero(bright.any(axis=0))
    assert rows.size and cols.size, "marker not found"
    return (
        int(rows[-1] - rows[0] + 1),
        int(cols[-1] - cols[0] + 1),
        float(rows[0] + rows[-1]) / 2,
        float(cols[0] + cols[-1]) / 2,
    )


@pytest.fixture(scope="module")
def media_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return tmp_path_factory.mktemp("video")


@pytest.fixture(scope="module", params=CODECS, ids=[ext for _, ext in CODECS])
def pattern_video(request: pytest.FixtureRequest, media_dir: pathlib.Path) -> pathlib.Path:
    fourcc, ext = request.param
    return _write_video(media_dir / f"pattern.{ext}", [_pattern(i) for i in range(NUM_FRAMES)], fourcc)


@pytest.fixture(scope="module")
def pattern_avi(media_dir: pathlib.Path) -> pathlib.Path:
    return _write_video(media_dir / "pattern_only.avi", [_pattern(i) for i in range(NUM_FRAMES)], "XVID")


@pytest.fixture(scope="module")
def marker_avi(media_dir: pathlib.Path) -> pathlib.Path:
    """320 x 240 video (HMDB51-like) with a centred 120 x 120 white square."""
    frame = np.zeros((240, 320, 3), np.uint8)
    frame[60:180, 100:220] = 255
    return _write_video(media_dir / "marker.avi", [frame] * 8, "XVID")


# Scene changes at these frames; the video is static in between.
SCENE_STARTS = (10, 23, 31)


@pytest.fixture(scope="module")
def scenes_avi(media_dir: pathlib.Path) -> pathlib.Path:
    yy, xx = np.mgrid[0:HEIGHT, 0:WIDTH]
    checker = np.where(((yy // 12) + (xx // 12)) % 2 == 0, 0, 255).astype(np.uint8)
    stripes = np.where((yy // 9) % 2 == 0, 255, 0).astype(np.uint8)
    scenes = [np.full((HEIGHT, WIDTH), 40, np.uint8), checker, np.full((HEIGHT, WIDTH), 210, np.uint8), stripes]
    bounds = (0, *SCENE_STARTS, NUM_FRAMES)
    frames = []
    for scene, start, stop in zip(scenes, bounds[:-1], bounds[1:]):
        frames += [cv2.cvtColor(scene, cv2.COLOR_GRAY2BGR)] * (stop - start)
    return _write_video(media_dir / "scenes.avi", frames, "XVID")


# ------------------------------------------------------------------------------- uniform_indices


@pytest.mark.parametrize("num_frames,num_samples", [(300, 20), (41, 40), (100, 7), (1000, 1), (64, 32)])
def test_uniform_indices_spread_over_whole_video(num_frames: int, num_samples: int) -> None:
    idx = video.uniform_indices(num_frames, num_samples)
    assert idx.dtype == np.int64
    assert len(idx) == num_samples
    assert np.all(np.diff(idx) > 0)
    assert idx.min() >= 0 and idx.max() < num_frames
    segment = num_frames / num_samples
    # Segment centres: each index lies in its own segment, so both ends are covered.
    assert np.all(idx >= np.floor(np.arange(num_samples) * segment))
    assert np.all(idx < np.ceil((np.arange(num_samples) + 1) * segment))
    assert idx[0] <= segment / 2 and idx[-1] >= num_frames - 1 - segment / 2


@pytest.mark.parametrize("num_frames,num_samples", [(5, 20), (20, 20), (0, 4), (7, 0)])
def test_uniform_indices_short_or_empty(num_frames: int, num_samples: int) -> None:
    idx = video.uniform_indices(num_frames, num_samples)
    np.testing.assert_array_equal(idx, np.arange(min(num_frames, num_samples)))
    assert idx.dtype == np.int64


def test_uniform_indices_rejects_negative() -> None:
    with pytest.raises(ValueError):
        video.uniform_indices(-1, 3)


# ------------------------------------------------------------------------------- probe / decode


def test_probe_video_reports_container_properties(pattern_video: pathlib.Path) -> None:
    info = video.probe_video(str(pattern_video))
    assert info == video.VideoInfo(num_frames=NUM_FRAMES, fps=FPS, height=HEIGHT, width=WIDTH)


def test_decode_all_frames_in_order(pattern_video: pathlib.Path) -> None:
    decoded = video.decode_frames(str(pattern_video))
    assert decoded.frames.shape == (NUM_FRAMES, HEIGHT, WIDTH, 3)
    assert decoded.frames.dtype == np.uint8
    assert [_read_pattern(f) for f in decoded.frames] == list(range(NUM_FRAMES))
    np.testing.assert_array_equal(decoded.indices, np.arange(NUM_FRAMES))
    assert decoded.num_decoded == NUM_FRAMES
    assert decoded.fps == FPS
    np.testing.assert_allclose(decoded.timestamps, np.arange(NUM_FRAMES) / FPS, atol=1e-3)


def test_decode_chosen_indices(pattern_video: pathlib.Path) -> None:
    # Unsorted, duplicated, and partly past the real end: sorted, unique, past-end dropped.
    decoded = video.decode_frames(str(pattern_video), [17, 3, 39, 3, 52, 0])
    np.testing.assert_array_equal(decoded.indices, [0, 3, 17, 39])
    assert [_read_pattern(f) for f in decoded.frames] == [0, 3, 17, 39]
    assert decoded.num_decoded == NUM_FRAMES  # the whole stream was counted
    np.testing.assert_allclose(decoded.timestamps, np.array([0, 3, 17, 39]) / FPS, atol=1e-3)


def test_decode_uniform_sample_matches_frames(pattern_avi: pathlib.Path) -> None:
    wanted = video.uniform_indices(NUM_FRAMES, 8)
    decoded = video.decode_frames(str(pattern_avi), wanted)
    np.testing.assert_array_equal(decoded.indices, wanted)
    assert [_read_pattern(f) for f in decoded.frames] == wanted.tolist()


def test_decode_no_indices_only_counts(pattern_avi: pathlib.Path) -> None:
    decoded = video.decode_frames(str(pattern_avi), [])
    assert decoded.frames.shape == (0, HEIGHT, WIDTH, 3)
    assert decoded.indices.shape == (0,) and decoded.timestamps.shape == (0,)
    assert decoded.num_decoded == NUM_FRAMES


@pytest.mark.parametrize("mode", ["resize", "crop"])
@pytest.mark.parametrize("size", [(32, 32), (48, 80), (100, 120)])
def test_decode_with_resize_gives_exact_shape(pattern_avi: pathlib.Path, mode: str, size: tuple[int, int]) -> None:
    decoded = video.decode_frames(str(pattern_avi), [5, 21], size=size, resize_mode=mode)
    assert decoded.frames.shape == (2, *size, 3)
    assert decoded.frames.dtype == np.uint8
    if mode == "resize":  # a plain stretch keeps the block layout, so the pattern still reads
        restored = [cv2.resize(f, (WIDTH, HEIGHT), interpolation=cv2.INTER_NEAREST) for f in decoded.frames]
        assert [_read_pattern(f) for f in restored] == [5, 21]


def test_decode_returns_rgb_not_bgr(media_dir: pathlib.Path) -> None:
    red_bgr = np.zeros((HEIGHT, WIDTH, 3), np.uint8)
    red_bgr[..., 2] = 255  # pure red in OpenCV's BGR order
    path = _write_video(media_dir / "red.avi", [red_bgr] * 5, "XVID")
    decoded = video.decode_frames(str(path), [2])
    means = decoded.frames[0].reshape(-1, 3).mean(axis=0)
    assert means[0] > 200 and means[1] < 60 and means[2] < 60


def test_crop_mode_preserves_aspect_ratio(marker_avi: pathlib.Path) -> None:
    cropped = video.decode_frames(str(marker_avi), [4], size=(64, 64), resize_mode="crop").frames[0]
    height, width, row, col = _marker_box(cropped)
    assert abs(height - width) <= 2  # the square stays square
    assert height == pytest.approx(120 * 64 / 240, abs=2)  # scaled by the short side
    assert row == pytest.approx(31.5, abs=1.5) and col == pytest.approx(31.5, abs=1.5)

    stretched = video.decode_frames(str(marker_avi), [4], size=(64, 64), resize_mode="resize").frames[0]
    height, width, _, _ = _marker_box(stretched)
    assert height == pytest.approx(32, abs=2) and width == pytest.approx(24, abs=2)


def test_max_frames_bounds_the_pass(pattern_avi: pathlib.Path) -> None:
    decoded = video.decode_frames(str(pattern_avi), [2, 30], max_frames=10)
    assert decoded.num_decoded == 10
    np.testing.assert_array_equal(decoded.indices, [2])


def test_timeout_raises_naming_the_path(pattern_avi: pathlib.Path) -> None:
    with pytest.raises(video.VideoDecodeError, match="timed out") as info:
        video.decode_frames(str(pattern_avi), timeout_s=1e-9)
    assert str(pattern_avi) in str(info.value)


def test_timestamps_fall_back_to_index_over_fps() -> None:
    indices = np.array([0, 5, 10], np.int64)
    np.testing.assert_allclose(video._timestamps([0.0, 200.0, 400.0], indices, 25.0), [0.0, 0.2, 0.4])
    # Positions all zero, decreasing or NaN are not trusted.
    for bad in ([0.0, 0.0, 0.0], [0.0, 400.0, 200.0], [0.0, float("nan"), 400.0]):
        np.testing.assert_allclose(video._timestamps(bad, indices, 10.0), [0.0, 0.5, 1.0])
    assert np.isnan(video._timestamps([0.0, 0.0, 0.0], indices, 0.0)).all()


# ------------------------------------------------------------------------------- damaged inputs


def test_zero_byte_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "empty.avi"
    path.touch()
    with pytest.raises(video.VideoDecodeError, match="empty"):
        video.probe_video(str(path))
    with pytest.raises(video.VideoDecodeError, match="empty"):
        video.decode_frames(str(path))


def test_text_file_named_avi(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "notes.avi"
    path.write_text("this is not a video\n" * 50)
    with pytest.raises(video.VideoDecodeError) as info:
        video.probe_video(str(path))
    assert str(path) in str(info.value)
    with pytest.raises(video.VideoDecodeError):
        video.decode_frames(str(path))
    with pytest.raises(video.VideoDecodeError):
        video.motion_indices(str(path), 4)


def test_missing_path(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "nope.avi"
    for call in (video.probe_video, video.decode_frames):
        with pytest.raises(FileNotFoundError) as info:
            call(str(path))
        assert isinstance(info.value, video.VideoDecodeError)  # one except clause catches all bad inputs
        assert str(path) in str(info.value)


def test_truncated_avi_errors_or_decodes_fewer_frames(tmp_path: pathlib.Path) -> None:
    rng = np.random.default_rng(0)  # noise frames make every frame large, so the cut lands mid-stream
    frames = [rng.integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8) for _ in range(NUM_FRAMES)]
    path = _write_video(tmp_path / "full.avi", frames, "XVID")
    data = path.read_bytes()
    cut = tmp_path / "cut.avi"
    cut.write_bytes(data[: int(len(data) * 0.3)])
    try:
        decoded = video.decode_frames(str(cut), timeout_s=30.0)
    except video.VideoDecodeError as error:
        assert str(cut) in str(error)
    else:
        assert 0 < decoded.num_decoded < NUM_FRAMES
        assert len(decoded.frames) == decoded.num_decoded
        assert decoded.frames.shape[1:] == (HEIGHT, WIDTH, 3)


def test_decode_on_directory_path(tmp_path: pathlib.Path) -> None:
    with pytest.raises(video.VideoDecodeError, match="directory"):
        video.decode_frames(str(tmp_path))


# ------------------------------------------------------------------------------- motion_indices


def test_motion_indices_pick_scene_changes(scenes_avi: pathlib.Path) -> None:
    picked = video.motion_indices(str(scenes_avi), 4, num_candidates=NUM_FRAMES)
    np.testing.assert_array_equal(picked, [0, *SCENE_STARTS])


def test_motion_indices_default_candidates(scenes_avi: pathlib.Path) -> None:
    picked = video.motion_indices(str(scenes_avi), 4)
    candidates = video.uniform_indices(NUM_FRAMES, 16)
    # The first candidate always wins; each change is seen at the first candidate at or after it.
    expected = [candidates[0]] + [candidates[candidates >= start][0] for start in SCENE_STARTS]
    np.testing.assert_array_equal(picked, expected)
    assert picked.dtype == np.int64
    assert np.all(np.diff(picked) > 0)  # time order
    np.testing.assert_array_equal(video.motion_indices(str(scenes_avi), 4), picked)  # deterministic


def test_motion_indices_fewer_changes_than_samples(scenes_avi: pathlib.Path) -> None:
    picked = video.motion_indices(str(scenes_avi), 6, num_candidates=NUM_FRAMES)
    assert len(picked) == 6 and np.all(np.diff(picked) > 0)
    assert set([0, *SCENE_STARTS]) <= set(picked.tolist())


def test_motion_indices_short_video(pattern_avi: pathlib.Path) -> None:
    np.testing.assert_array_equal(video.motion_indices(str(pattern_avi), 50), np.arange(NUM_FRAMES))


def test_motion_indices_when_container_overstates_length(scenes_avi: pathlib.Path) -> None:
    # A header claiming 400 frames: the real 40 are re-sampled instead of returning too few.
    info = video.VideoInfo(num_frames=400, fps=FPS, height=HEIGHT, width=WIDTH)
    picked = video.motion_indices(str(scenes_avi), 4, info=info)
    assert len(picked) == 4 and picked.max() < NUM_FRAMES and np.all(np.diff(picked) > 0)


def test_motion_indices_within_a_frame_range(scenes_avi: pathlib.Path) -> None:
    # Frames 15..34 hold the changes at 23 and 31: the range's first frame plus those two.
    picked = video.motion_indices(str(scenes_avi), 3, num_candidates=20, frame_range=(15, 35))
    np.testing.assert_array_equal(picked, [15, *SCENE_STARTS[1:]])
    np.testing.assert_array_equal(video.motion_indices(str(scenes_avi), 8, frame_range=(36, 40)), [36, 37, 38, 39])
    with pytest.raises(ValueError, match="frame_range"):
        video.motion_indices(str(scenes_avi), 3, frame_range=(5, 5))


def test_stop_at_ends_the_pass_silently(pattern_avi: pathlib.Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO")
    decoded = video.decode_frames(str(pattern_avi), [3, 8, 30], stop_at=10)
    assert decoded.num_decoded == 10 and decoded.indices.tolist() == [3, 8]  # 30 lies past the stop
    assert [_read_pattern(f) for f in decoded.frames] == [3, 8]
    assert "max_frames" not in caplog.text and "container reports" not in caplog.text
    assert video.decode_frames(str(pattern_avi), [0], stop_at=500).num_decoded == NUM_FRAMES  # a shorter video


# ------------------------------------------------------------------------------- resize_frame


def test_resize_frame_modes_and_errors() -> None:
    frame = np.random.default_rng(1).integers(0, 256, (240, 320, 3), dtype=np.uint8)
    assert frame_ops.resize_frame(frame, (64, 48)).shape == (64, 48, 3)
    assert frame_ops.resize_frame(frame, (64, 48), mode="crop").shape == (64, 48, 3)
    assert frame_ops.resize_frame(frame, (480, 700), mode="crop").shape == (480, 700, 3)  # enlarging
    assert frame_ops.resize_frame(frame[..., 0], (30, 40)).shape == (30, 40)  # grayscale
    assert frame_ops.resize_frame(frame[..., :1], (30, 40)).shape == (30, 40, 1)
    with pytest.raises(ValueError, match="mode"):
        frame_ops.resize_frame(frame, (64, 48), mode="pad")
    with pytest.raises(ValueError):
        frame_ops.resize_frame(frame, (0, 48))


def test_resize_frame_crop_takes_the_centre() -> None:
    # Same size target in crop mode is the identity; a narrower target keeps the middle columns.
    frame = np.tile(np.arange(320, dtype=np.uint16)[None, :, None] % 256, (240, 1, 3)).astype(np.uint8)
    np.testing.assert_array_equal(frame_ops.resize_frame(frame, (240, 320), mode="crop"), frame)
    middle = frame_ops.resize_frame(frame, (240, 100), mode="crop")
    np.testing.assert_array_equal(middle, frame[:, 110:210])
    rows = np.ascontiguousarray(frame[:, :240].transpose(1, 0, 2))  # value = row index
    np.testing.assert_array_equal(frame_ops.resize_frame(rows, (100, 240), mode="crop"), rows[70:170])


def test_resize_frame_interpolation_override() -> None:
    frame = np.zeros((4, 4), np.uint8)
    frame[:2, :2] = 255
    nearest = frame_ops.resize_frame(frame, (8, 8), interpolation=cv2.INTER_NEAREST)
    assert set(np.unique(nearest).tolist()) == {0, 255}
    linear = frame_ops.resize_frame(frame, (8, 8))
    assert len(np.unique(linear)) > 2  # default INTER_LINEAR when enlarging blends the edge


# ------------------------------------------------------------------------------- pad_and_mask


def test_pad_and_mask_in_order() -> None:
    frames = np.stack([np.full((4, 5, 3), 10 * (i + 1), np.uint8) for i in range(3)])
    clip, mask = frame_ops.pad_and_mask(frames, 6)
    assert clip.shape == (6, 4, 5, 3) and clip.dtype == np.uint8
    assert mask.dtype == np.uint8
    np.testing.assert_array_equal(mask, [1, 1, 1, 0, 0, 0])
    np.testing.assert_array_equal(clip[:3], frames)
    assert not clip[3:].any()


def test_pad_and_mask_positions_and_lists() -> None:
    frames = [np.full((4, 5, 3), v, np.uint8) for v in (7, 8, 9)]
    clip, mask = frame_ops.pad_and_mask(frames, 5, positions=[0, 2, 4])
    np.testing.assert_array_equal(mask, [1, 0, 1, 0, 1])
    assert int(mask.sum()) == 3
    assert [int(clip[i].max()) for i in range(5)] == [7, 0, 8, 0, 9]


def test_pad_and_mask_no_frames_and_errors() -> None:
    clip, mask = frame_ops.pad_and_mask([], 4, frame_shape=(2, 3, 3))
    assert clip.shape == (4, 2, 3, 3) and not clip.any() and not mask.any()
    frames = np.zeros((3, 2, 3, 3), np.uint8)
    with pytest.raises(ValueError, match="more than"):
        frame_ops.pad_and_mask(frames, 2)
    with pytest.raises(ValueError, match="frame_shape"):
        frame_ops.pad_and_mask([], 4)
    with pytest.raises(ValueError, match="frame_shape"):
        frame_ops.pad_and_mask(frames, 4, frame_shape=(2, 3, 1))
    with pytest.raises(ValueError, match="unique"):
        frame_ops.pad_and_mask(frames, 4, positions=[0, 0, 1])
    with pytest.raises(ValueError, match="lie in"):
        frame_ops.pad_and_mask(frames, 4, positions=[0, 1, 4])
    with pytest.raises(ValueError, match="uint8"):
        frame_ops.pad_and_mask(frames.astype(np.float32), 4)


# ------------------------------------------------------------------------------- images


@pytest.mark.parametrize("ext", ["jpg", "png"])
def test_read_image_is_rgb(tmp_path: pathlib.Path, ext: str) -> None:
    bgr = np.zeros((54, 96, 3), np.uint8)
    bgr[..., 2] = 255  # red in BGR order
    bgr[:, :48, 0] = 255  # left half: red + blue = magenta
    path = tmp_path / f"frame.{ext}"
    assert cv2.imwrite(str(path), bgr)
    rgb = video.read_image(str(path))
    assert rgb.shape == (54, 96, 3) and rgb.dtype == np.uint8
    right = rgb[:, 60:].reshape(-1, 3).mean(axis=0)
    assert right[0] > 200 and right[1] < 40 and right[2] < 40
    left = rgb[:, :40].reshape(-1, 3).mean(axis=0)
    assert left[0] > 200 and left[2] > 200 and left[1] < 40
    assert video.read_image(str(path), size=(27, 48)).shape == (27, 48, 3)
    assert video.read_image(str(path), size=(30, 30), resize_mode="crop").shape == (30, 30, 3)


def test_read_image_grayscale_becomes_three_channels(tmp_path: pathlib.Path) -> None:
    gray = np.tile(np.arange(0, 256, 4, dtype=np.uint8), (10, 1))
    path = tmp_path / "gray.png"
    assert cv2.imwrite(str(path), gray)
    rgb = video.read_image(str(path))
    assert rgb.shape == (10, 64, 3)
    for channel in range(3):
        np.testing.assert_array_equal(rgb[..., channel], gray)


def test_read_image_bad_inputs(tmp_path: pathlib.Path) -> None:
    missing = tmp_path / "missing.jpg"
    with pytest.raises(FileNotFoundError) as info:
        video.read_image(str(missing))
    assert str(missing) in str(info.value)
    corrupt = tmp_path / "corrupt.jpg"
    corrupt.write_bytes(np.random.default_rng(2).integers(0, 256, 2000, dtype=np.uint8).tobytes())
    with pytest.raises(video.ImageDecodeError) as info:
        video.read_image(str(corrupt))
    assert str(corrupt) in str(info.value)
    empty = tmp_path / "empty.png"
    empty.touch()
    with pytest.raises(video.ImageDecodeError, match="empty"):
        video.read_image(str(empty))


# ------------------------------------------------------------------------------- encoding


def _smooth_clip() -> np.ndarray:
    yy, xx = np.mgrid[0:48, 0:64]
    frames = []
    for t in range(3):
        frame = np.stack([xx * 4, yy * 5, np.full_like(xx, 60 * t)], axis=-1)
        frames.append(frame.clip(0, 255).astype(np.uint8))
    return np.stack(frames)


def test_encode_frames_png_round_trip_is_exact() -> None:
    clip = _smooth_clip()
    encoded = frame_ops.encode_frames(clip, image_format="png")
    assert len(encoded) == 3 and all(isinstance(b, bytes) for b in encoded)
    assert encoded[0].startswith(b"\x89PNG")
    for frame, data in zip(clip, encoded):
        decoded = cv2.cvtColor(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
        np.testing.assert_array_equal(decoded, frame)


def test_encode_frames_jpeg_round_trip_is_close() -> None:
    clip = _smooth_clip()
    encoded = frame_ops.encode_frames(clip, image_format="jpeg", quality=95)
    assert encoded[0].startswith(b"\xff\xd8")
    for frame, data in zip(clip, encoded):
        decoded = cv2.cvtColor(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
        assert np.abs(decoded.astype(int) - frame.astype(int)).mean() < 3.0
    noise = np.random.default_rng(3).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    assert len(frame_ops.encode_frame(noise, quality=95)) > len(frame_ops.encode_frame(noise, quality=20))


def test_encode_frame_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="image_format"):
        frame_ops.encode_frame(np.zeros((4, 4, 3), np.uint8), image_format="gif")
    with pytest.raises(ValueError, match="RGB uint8"):
        frame_ops.encode_frame(np.zeros((4, 4), np.uint8))
    with pytest.raises(ValueError, match="quality"):
        frame_ops.encode_frame(np.zeros((4, 4, 3), np.uint8), quality=101)


def test_container_with_no_decodable_frame(tmp_path: pathlib.Path) -> None:
    """A real AVI written by OpenCV with zero frames: it opens, but nothing decodes."""
    path = str(tmp_path / "empty.avi")
    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"XVID"), 25.0, (64, 48))
    writer.release()
    assert pathlib.Path(path).stat().st_size > 0
    with pytest.raises(video.VideoDecodeError, match="no decodable frame"):
        video.decode_frames(path)


# ------------------------------------------- headers that lie, containers with no count, names that are not UTF-8


def _raw_clip_spec(num_frames: int | None) -> clips.ClipSpec:
    return clips.ClipSpec(num_frames=num_frames, height=HEIGHT, width=WIDTH, image_format="raw" if num_frames else "png")


def _clip(path: pathlib.Path, spec: clips.ClipSpec) -> dict:
    ((_, example),) = clips.clip_example(clips.ClipSource(path=str(path), key="k", features={}), spec)
    return example


def test_a_header_claiming_a_million_frames_is_sampled_over_the_real_length(media_dir: pathlib.Path) -> None:
    path = _write_video(media_dir / "claims.avi", [_pattern(i) for i in range(NUM_FRAMES)], "MJPG")
    hostile_videos.claim_frames(str(path), 1_000_000)
    assert video.probe_video(str(path)).num_frames == 1_000_000
    example = _clip(path, _raw_clip_spec(8))
    expected = video.uniform_indices(NUM_FRAMES, 8)  # over the 40 real frames, not the claimed million
    assert int(example["num_frames"]) == NUM_FRAMES and example["mask"].tolist() == [1] * 8
    assert example["frame_indices"].tolist() == expected.tolist()
    assert [_read_pattern(frame) for frame in example["video"]] == expected.tolist()


def test_a_container_with_no_frame_count_is_counted_then_sampled(media_dir: pathlib.Path) -> None:
    path = media_dir / "stream.mjpeg"  # a raw MJPEG stream: FFmpeg knows no frame count for it
    with open(path, "wb") as f:
        for i in range(30):
            f.write(cv2.imencode(".jpg", _pattern(i))[1].tobytes())
    assert video.probe_video(str(path)).num_frames == 0
    example = _clip(path, _raw_clip_spec(8))
    expected = video.uniform_indices(30, 8)
    assert int(example["num_frames"]) == 30 and example["frame_indices"].tolist() == expected.tolist()
    assert [_read_pattern(frame) for frame in example["video"]] == expected.tolist()


def test_every_frame_clips_are_encoded_frame_by_frame_into_the_same_bytes(pattern_avi: pathlib.Path) -> None:
    example = _clip(pattern_avi, _raw_clip_spec(None))
    decoded = video.decode_frames(str(pattern_avi), size=(HEIGHT, WIDTH))
    assert example["video"] == frame_ops.encode_frames(decoded.frames, image_format="png")
    assert example["mask"].tolist() == [1] * NUM_FRAMES and example["frame_indices"].tolist() == list(range(NUM_FRAMES))


def test_a_long_list_of_wanted_frames_is_not_preallocated(pattern_avi: pathlib.Path) -> None:
    wanted = np.arange(0, 5 * video.PREALLOCATE_MAX_FRAMES)  # what a lying header could ask for; 40 exist
    decoded = video.decode_frames(str(pattern_avi), wanted)
    assert decoded.frames.shape == (NUM_FRAMES, HEIGHT, WIDTH, 3)
    assert [_read_pattern(frame) for frame in decoded.frames] == list(range(NUM_FRAMES))


def test_a_name_that_is_not_utf8_is_opened_through_an_ascii_link(pattern_avi: pathlib.Path, tmp_path: pathlib.Path) -> None:
    latin1 = os.path.join(str(tmp_path), os.fsdecode(b"caf\xe9.avi"))
    shutil.copy(pattern_avi, latin1)
    assert video.probe_video(latin1).num_frames == NUM_FRAMES  # OpenCV given this name itself would segfault
    decoded = video.decode_frames(latin1, [3, 5])
    assert [_read_pattern(frame) for frame in decoded.frames] == [3, 5]
    with pytest.raises(video.VideoDecodeError, match="caf\udce9.avi: OpenCV cannot open"):  # errors name the file itself
        with open(latin1, "wb") as f:
            f.write(b"not a video" * 10)
        video.probe_video(latin1)
