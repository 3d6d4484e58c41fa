"""`vidvol.ReadSpec` (`Clips`, `Normalize`, `Output`) and `Tuning`: checks in one place, and the retired keywords."""

from __future__ import annotations

import pickle
import re

import numpy as np
import pytest
import tensorflow as tf

import vidvol
from vidvol import Clips, Normalize, Output, ReadSpec, Tuning
from vidvol.readers import keywords


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


# -- the keywords retired in 0.2.0 ---------------------------------------------------------------


@keywords.checked(*keywords.LOAD, tuning=True)
def _reader(name, *, seed=None, spec=None, tuning=None):
    return spec, tuning


RETIRED = [
    ("clip_length", 16, "spec=vidvol.ReadSpec(clips=vidvol.Clips(length=16))"),
    ("eval_clips", 3, "spec=vidvol.ReadSpec(clips=vidvol.Clips(eval_clips=3))"),
    ("mean", (0.4, 0.5, 0.6), "spec=vidvol.ReadSpec(normalize=vidvol.Normalize(mean=(0.4, 0.5, 0.6)))"),
    ("features", ["label"], "spec=vidvol.ReadSpec(output=vidvol.Output(features=['label']))"),
    ("output_dtype", "uint8", "spec=vidvol.ReadSpec(output=vidvol.Output(dtype='uint8'))"),
    ("cycle_length", 4, "tuning=vidvol.Tuning(cycle_length=4)"),
]


@pytest.mark.parametrize("keyword,value,spelling", RETIRED, ids=[r[0] for r in RETIRED])
def test_a_retired_keyword_is_a_type_error_giving_the_new_spelling(keyword, value, spelling):
    with pytest.raises(TypeError, match=re.escape(f"_reader() no longer takes {keyword}= (retired in vidvol 0.2.0): "
                                                  f"pass {spelling}")):
        _reader("x", **{keyword: value})
    assert _reader("x", spec=ReadSpec(clips=Clips(length=2))) == (ReadSpec(clips=Clips(length=2)), None)


def test_the_real_readers_refuse_the_retired_keywords_before_reading(mri_small):
    with pytest.raises(TypeError, match=re.escape("load() no longer takes mean= (retired in vidvol 0.2.0): pass "
                                                  "spec=vidvol.ReadSpec(normalize=vidvol.Normalize(mean=0.5))")):
        vidvol.load(mri_small, "train", 2, mean=0.5)
    with pytest.raises(TypeError, match=r"grain_dataset\(\) no longer takes clip_length="):
        vidvol.grain_dataset(mri_small, "train", 2, clip_length=4)
    with pytest.raises(TypeError, match=r"^Tuning.__init__\(\) got an unexpected keyword argument 'shuffle_buffer_bytes'"):
        Tuning(shuffle_buffer_bytes=1)  # retired in 0.2.0: it had no effect
    assert not hasattr(vidvol.readers, "shuffle_buffer_size") and not hasattr(vidvol.readers, "DEFAULT_SHUFFLE_BUFFER_BYTES")


def test_an_unknown_keyword_is_a_type_error_naming_the_closest(mri_small):
    with pytest.raises(TypeError, match=r"_reader\(\) got an unexpected keyword argument 'clip_lenght'; did you mean "
                                        r"'clip_length' \(since 0.2.0: spec=vidvol.ReadSpec\(clips=vidvol.Clips\(length=\.\.\.\)\)\)\?"):
        _reader("x", clip_lenght=8)
    with pytest.raises(TypeError, match=r"load\(\) got an unexpected keyword argument 'seeds'; did you mean 'seed'\?"):
        vidvol.load(mri_small, "train", 2, seeds=0)
    with pytest.raises(TypeError, match=r"grain_dataset\(\) got an unexpected keyword argument 'num_epoch'; did you "
                                        r"mean 'num_epochs'\?"):
        vidvol.grain_dataset(mri_small, "train", 2, num_epoch=2)
    with pytest.raises(TypeError, match=r"data_source\(\) got an unexpected keyword argument 'zzz'; it takes name, "
                                        r"split, data_dir, spec, num_threads, training, seed$"):
        vidvol.data_source(mri_small, "train", zzz=1)
