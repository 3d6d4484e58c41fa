"""`vidvol.ReadSpec` (`Clips`, `Normalize`, `Output`) and `Tuning`: checks in one place, and the old keywords.

The old spelling (`clip_length=16`, `mean=`, `cycle_length=4`...) must warn with the new spelling
exactly, at the caller's line, and give the same batches as the new one: compared here on
datasets built by the real Beam pipeline (hmdb51 from real AVI files, mri_volumes from NIfTI).
"""

from __future__ import annotations

import pickle
import re
import warnings

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from batch_checks import assert_same_batches  # tests/batch_checks.py (tests/ on sys.path)
import vidvol
from vidvol import Clips, Normalize, Output, ReadSpec, Tuning
from vidvol.readers import legacy


# -- the spec ------------------------------------------------------------------------------------


def test_defaults_are_what_load_always_read():
    assert ReadSpec() == ReadSpec(Clips(), Normalize(), Output()) and ReadSpec().changed() == ()
    assert (Clips().length, Clips().stride, Clips().eval_clips) == (None, 1, 1) and Clips().window() is None
    assert (Normalize().mean, Normalize().std, Normalize().resize) == (0.0, 1.0, None)
    assert (Output().dtype, Output().mask_dtype, Output().features, Output().inputs, Output().target) == (
        "float32", "float32", None, None, None)
    assert vidvol.ReadSpec is ReadSpec and vidvol.Tuning is Tuning


def test_values_are_stored_canonical_hashable_and_picklable():
    spec = ReadSpec(clips=Clips(length=np.int64(8), stride=2),
                    normalize=Normalize(mean=[0.4, 0.5, 0.6], std=np.float32(0.25), resize=np.array([24, 32])),
                    output=Output(dtype=tf.bfloat16, mask_dtype=np.uint8, inputs="video"))
    assert spec.normalize.mean == (0.4, 0.5, 0.6) and spec.normalize.std == 0.25 and spec.normalize.resize == (24, 32)
    assert spec.output.dtype == "bfloat16" and spec.output.mask_dtype == "uint8" and spec.output.inputs == ("video",)
    assert spec.clips.window().clip_length == 8 and spec.clips.window().span == 15
    assert spec.changed() == ("clips.length", "clips.stride", "normalize.mean", "normalize.std", "normalize.resize",
                              "output.dtype", "output.mask_dtype", "output.inputs")
    assert pickle.loads(pickle.dumps(spec)) == spec and hash(spec) == hash(pickle.loads(pickle.dumps(spec)))
    assert Output(features="label").features == ("label",) and Output(mask_dtype=None).mask_dtype is None
    with pytest.raises(AttributeError):
        spec.clips.length = 4  # frozen


@pytest.mark.parametrize("make,message", [
    (lambda: Clips(length=0), r"Clips.length must be None or an integer >= 1, got 0"),
    (lambda: Clips(length=4, stride=1.5), r"Clips.stride must be an integer >= 1, got 1.5"),
    (lambda: Clips(length=4, eval_clips=True), r"Clips.eval_clips must be an integer >= 1, got True"),
    (lambda: Clips(eval_clips=3), r"Clips.stride and Clips.eval_clips apply to clips of Clips.length frames"),
    (lambda: Normalize(std=(0.2, 0.0, 0.3)), r"Normalize.std must be non-zero"),
    (lambda: Normalize(mean="imagenet"), r"Normalize.mean must be a finite number or one per channel, got 'imagenet'"),
    (lambda: Normalize(mean=float("nan")), r"Normalize.mean must be a finite number"),
    (lambda: Normalize(mean=(0.4, 0.5), std=(0.2, 0.2, 0.2)), r"Normalize.mean and Normalize.std must have as many"),
    (lambda: Normalize(resize=32), r"Normalize.resize must be None or \(height, width\), got 32"),
    (lambda: Normalize(resize=(32, 0)), r"Normalize.resize must be an integer >= 1, got 0"),
    (lambda: Output(dtype="float64"), r"Output.dtype must be one of \['float32', 'bfloat16', 'float16', 'uint8', "
                                      r"'int16'\] \(or the matching tf/np dtype\), got 'float64'"),
    (lambda: Output(mask_dtype=tf.int32), r"Output.mask_dtype must be one of \['float32', 'bfloat16', 'float16', "
                                          r"'uint8', 'bool'\] or None"),
    (lambda: Output(features=[]), r"Output.features must be None, a feature name or a non-empty sequence"),
    (lambda: Output(inputs=("video", 3)), r"Output.inputs must be None, a feature name"),
    (lambda: Output(target=("label",)), r"Output.target must be None or one feature name"),
    (lambda: Output(features=["video"], target="label"), r"Output.features returns dicts.*set one or the other"),
    (lambda: Output(features=["mask"], mask_dtype="uint8"), r"Output.mask_dtype applies to the supervised tuple"),
    (lambda: ReadSpec(clips=16), r"ReadSpec.clips must be a vidvol.Clips, got 16"),
    (lambda: ReadSpec(normalize=Normalize(resize=(8, 8)), output=Output(dtype="uint8")), r"resize on the device"),
    (lambda: ReadSpec(normalize=Normalize(std=0.5), output=Output(dtype="int16")),
     r"pass mean= and std= to vidvol.dequantize_params"),
    (lambda: Tuning(shuffle_buffer_bytes=0), r"Tuning.shuffle_buffer_bytes must be an integer >= 1, got 0"),
    (lambda: Tuning(cycle_length=-2), r"Tuning.cycle_length must be None or an integer >= 1, got -2"),
    (lambda: Tuning(parse_per_batch=None), r"Tuning.parse_per_batch must be True or False, got None"),
    (lambda: Tuning(deterministic="yes"), r"Tuning.deterministic must be None, True or False, got 'yes'"),
])
def test_bad_values_are_value_errors_naming_the_field_and_the_choices(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_a_reader_names_the_parts_it_cannot_honour():
    spec = ReadSpec(clips=Clips(length=4), normalize=Normalize(resize=(8, 8)))
    spec.check_supported("r", ("clips", "normalize.resize"), "why")
    with pytest.raises(ValueError, match=r"^r cannot honour spec normalize.resize \(it is NumPy\); it takes clips$"):
        spec.check_supported("r", ("clips",), "it is NumPy")


# -- the old keywords, on a reader that only returns what it was given ---------------------------


@legacy.old_keywords(*legacy.LOAD, tuning=True)
def _reader(name, *, seed=None, spec=None, tuning=None):
    return spec, tuning


OLD = [
    ("clip_length", 16, ReadSpec(clips=Clips(length=16)), "spec=vidvol.ReadSpec(clips=vidvol.Clips(length=16))"),
    ("clip_stride", 2, None, "spec=vidvol.ReadSpec(clips=vidvol.Clips(stride=2))"),
    ("eval_clips", 3, None, "spec=vidvol.ReadSpec(clips=vidvol.Clips(eval_clips=3))"),
    ("mean", (0.4, 0.5, 0.6), ReadSpec(normalize=Normalize(mean=(0.4, 0.5, 0.6))),
     "spec=vidvol.ReadSpec(normalize=vidvol.Normalize(mean=(0.4, 0.5, 0.6)))"),
    ("std", 0.25, ReadSpec(normalize=Normalize(std=0.25)), "spec=vidvol.ReadSpec(normalize=vidvol.Normalize(std=0.25))"),
    ("resize", (24, 32), ReadSpec(normalize=Normalize(resize=(24, 32))),
     "spec=vidvol.ReadSpec(normalize=vidvol.Normalize(resize=(24, 32)))"),
    ("inputs", ("video",), ReadSpec(output=Output(inputs="video")),
     "spec=vidvol.ReadSpec(output=vidvol.Output(inputs=('video',)))"),
    ("target", "label", ReadSpec(output=Output(target="label")), "spec=vidvol.ReadSpec(output=vidvol.Output(target='label'))"),
    ("features", ["label"], ReadSpec(output=Output(features=["label"])),
     "spec=vidvol.ReadSpec(output=vidvol.Output(features=['label']))"),
    ("mask_dtype", None, ReadSpec(output=Output(mask_dtype=None)), "spec=vidvol.ReadSpec(output=vidvol.Output(mask_dtype=None))"),
    ("output_dtype", "uint8", ReadSpec(output=Output(dtype="uint8")),
     "spec=vidvol.ReadSpec(output=vidvol.Output(dtype='uint8'))"),
]


@pytest.mark.parametrize("keyword,value,spec,spelling", OLD, ids=[o[0] for o in OLD])
def test_each_old_keyword_warns_with_the_new_spelling_at_the_callers_line(keyword, value, spec, spelling):
    kwargs = {keyword: value}
    if spec is None:  # stride and eval_clips need a length: the warning names each keyword alone
        kwargs["clip_length"] = 8
        spec = ReadSpec(clips=Clips(**{"length": 8, keyword.replace("clip_", ""): value}))
    with pytest.warns(DeprecationWarning) as record:
        got, tuning = _reader("x", **kwargs)
    assert got == spec and tuning is None
    mine = [w for w in record if str(w.message).startswith(f"{keyword}=")]
    assert len(mine) == 1 and str(mine[0].message) == f"{keyword}={value!r} is deprecated: pass {spelling}"
    assert mine[0].filename == __file__  # the caller's line, not the reader's


@pytest.mark.parametrize("field", legacy.TUNING_KEYWORDS)
def test_tuning_fields_as_keywords_warn_and_become_a_tuning(field):
    value = {"deterministic": True, "parse_per_batch": False, "direct_reads": False}.get(field, 7)
    with pytest.warns(DeprecationWarning, match=re.escape(f"{field}={value!r} is deprecated: pass "
                                                          f"tuning=vidvol.Tuning({field}={value!r})")):
        spec, tuning = _reader("x", **{field: value})
    assert spec == ReadSpec() and tuning == Tuning(**{field: value})


def test_old_keywords_join_a_spec_whose_part_they_do_not_touch():
    with pytest.warns(DeprecationWarning):
        spec, _ = _reader("x", clip_length=8, mean=0.5, spec=ReadSpec(output=Output(dtype="bfloat16")))
    assert spec == ReadSpec(clips=Clips(length=8), normalize=Normalize(mean=0.5), output=Output(dtype="bfloat16"))


def test_an_old_keyword_and_its_spec_part_together_are_a_type_error_naming_both():
    with pytest.raises(TypeError, match=r"_reader\(\) got clip_length= and spec.clips \(Clips\(length=4.*\)\), which both "
                                        r"set the clips; pass only spec=vidvol.ReadSpec\(clips=vidvol.Clips\(\.\.\., length=8\)\)"):
        _reader("x", clip_length=8, spec=ReadSpec(clips=Clips(length=4)))
    with pytest.raises(TypeError, match=r"got mask_dtype= and spec.output"):
        _reader("x", mask_dtype="uint8", spec=ReadSpec(output=Output(dtype="bfloat16")))
    with pytest.raises(TypeError, match=r"got cycle_length= and tuning=, which both set Tuning.cycle_length; pass only "
                                        r"tuning=vidvol.Tuning\(\.\.\., cycle_length=2\)"):
        _reader("x", cycle_length=2, tuning=Tuning())


def test_an_unknown_keyword_is_a_type_error_naming_the_closest(mri_small):
    with pytest.raises(TypeError, match=r"_reader\(\) got an unexpected keyword argument 'clip_lenght'; did you mean "
                                        r"'clip_length' \(deprecated: spec=vidvol.ReadSpec\(clips=vidvol.Clips\(length=\.\.\.\)\)\)\?"):
        _reader("x", clip_lenght=8)
    with pytest.raises(TypeError, match=r"load\(\) got an unexpected keyword argument 'seeds'; did you mean 'seed'\?"):
        vidvol.load(mri_small, "train", 2, seeds=0)
    with pytest.raises(TypeError, match=r"grain_dataset\(\) got an unexpected keyword argument 'num_epoch'; did you "
                                        r"mean 'num_epochs'\?"):
        vidvol.grain_dataset(mri_small, "train", 2, num_epoch=2)
    with pytest.raises(TypeError, match=r"data_source\(\) got an unexpected keyword argument 'zzz'; it takes name, "
                                        r"split, data_dir, spec, num_threads, training, seed$"):
        vidvol.data_source(mri_small, "train", zzz=1)


# -- old and new spelling on real data: the same batches -------------------------------------------


def _batches(builder, split, batch_size, **kw):
    return list(tfds.as_numpy(vidvol.load(builder, split, batch_size, **kw)))


def _new_spelling_is_quiet(fn):
    """fn() with warnings recorded: none may be ours."""
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        out = fn()
    assert not [w for w in record if "is deprecated: pass" in str(w.message)]
    return out


CASES = [  # (split, old keywords, new keywords)
    ("train", dict(seed=3, clip_length=6, clip_stride=2), dict(seed=3, spec=ReadSpec(clips=Clips(length=6, stride=2)))),
    ("test", dict(clip_length=4, clip_stride=3, eval_clips=2), dict(spec=ReadSpec(clips=Clips(4, 3, eval_clips=2)))),
    ("test", dict(mean=(0.4, 0.5, 0.6), std=[0.2, 0.25, 0.3], resize=(24, 32)),
     dict(spec=ReadSpec(normalize=Normalize((0.4, 0.5, 0.6), (0.2, 0.25, 0.3), resize=(24, 32))))),
    ("test", dict(output_dtype="uint8", mask_dtype=tf.bool), dict(spec=ReadSpec(output=Output("uint8", "bool")))),
    ("train", dict(seed=1, features=["video", "mask", "video_id"], output_dtype="bfloat16"),
     dict(seed=1, spec=ReadSpec(output=Output(dtype="bfloat16", features=("video", "mask", "video_id"))))),
    ("test", dict(inputs="video", target="num_frames", mean=0.5), dict(
        spec=ReadSpec(normalize=Normalize(mean=0.5), output=Output(inputs=("video",), target="num_frames")))),
    ("train", dict(seed=2, cycle_length=1, parse_per_batch=False, shuffle_buffer_bytes=2 * 10**5, deterministic=True,
                   memory_budget_bytes=2**20),
     dict(seed=2, tuning=Tuning(shuffle_buffer_bytes=2 * 10**5, cycle_length=1, memory_budget_bytes=2**20,
                                deterministic=True, parse_per_batch=False))),
    ("train", dict(seed=4, clip_length=5, spec=ReadSpec(output=Output(mask_dtype="uint8")), cycle_length=2),
     dict(seed=4, spec=ReadSpec(clips=Clips(length=5), output=Output(mask_dtype="uint8")), tuning=Tuning(cycle_length=2))),
]


@pytest.mark.parametrize("split,old,new", CASES[:2] + [pytest.param(*c, marks=pytest.mark.slow) for c in CASES[2:]])
def test_old_and_new_spelling_read_the_same_batches(hmdb_small, split, old, new):
    spelled_old = {k for k in old if k not in ("seed", "spec")}
    with pytest.warns(DeprecationWarning) as record:
        before = _batches(hmdb_small, split, 2, **old)
    ours = [str(w.message) for w in record if "is deprecated: pass" in str(w.message)]
    assert sorted(m.split("=")[0] for m in ours) == sorted(spelled_old)
    after = _new_spelling_is_quiet(lambda: _batches(hmdb_small, split, 2, **new))
    assert_same_batches(before, after)


def test_old_and_new_spelling_read_the_same_volumes(mri_small):
    old = dict(seed=0, output_dtype="float16", mask_dtype="uint8", direct_reads=False)
    with pytest.warns(DeprecationWarning, match=re.escape("direct_reads=False is deprecated: pass "
                                                          "tuning=vidvol.Tuning(direct_reads=False)")):
        before = _batches(mri_small, "train", 2, **old)
    spec = ReadSpec(output=Output(dtype="float16", mask_dtype="uint8"))
    after = _new_spelling_is_quiet(lambda: _batches(mri_small, "train", 2, seed=0, spec=spec,
                                                     tuning=Tuning(direct_reads=False)))
    assert_same_batches(before, after)
    assert before[0][0][0].dtype == np.float16 and before[0][0][1].dtype == np.uint8


def test_distribute_takes_the_old_keywords_once_at_the_call(hmdb_small):
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with pytest.warns(DeprecationWarning, match=re.escape("mean=0.5 is deprecated")) as record:
        old = vidvol.distribute(strategy, hmdb_small, "train", 2, seed=0, mean=0.5)
    assert [w.filename for w in record if "is deprecated: pass" in str(w.message)] == [__file__]
    new = _new_spelling_is_quiet(lambda: vidvol.distribute(strategy, hmdb_small, "train", 2, seed=0,
                                                            spec=ReadSpec(normalize=Normalize(mean=0.5))))
    (x_old, m_old), y_old = next(iter(old))
    (x_new, m_new), y_new = next(iter(new))
    np.testing.assert_array_equal(x_old.numpy(), x_new.numpy())
    np.testing.assert_array_equal(y_old.numpy(), y_new.numpy())
    assert float(tf.reduce_min(x_new)) < 0  # (x - 0.5) / 1: the mean applied
