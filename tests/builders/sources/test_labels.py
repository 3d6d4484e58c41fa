"""What several datasets share about listing labelled inputs: label order, hashed splits, listed paths."""

from vidvol.builders.sources import labels


def test_label_names_sort_numbers_numerically_else_as_strings():
    assert labels.label_names(["10", "2", "0", "1", "2"]) == ["0", "1", "2", "10"]
    assert labels.label_names(["1.5", "-3", "1e1"]) == ["-3", "1.5", "1e1"]
    assert labels.label_names(["pass", "fail", "10", "2"]) == ["10", "2", "fail", "pass"]
    assert labels.label_names(["nan", "1"]) == ["1", "nan"]  # not all finite numbers: string order


def test_hashed_split_takes_fractions_as_consecutive_slices_and_is_stable():
    fractions = {"train": 0.5, "validation": 0.25, "test": 0.25}
    ids = [f"v{i}" for i in range(400)]
    got = [labels.hashed_split(i, fractions) for i in ids]
    assert got == [labels.hashed_split(i, fractions) for i in ids]  # the same on every call
    for identity, split in zip(ids, got):
        x = labels.hash_fraction(identity)
        assert 0.0 <= x < 1.0
        assert split == ("train" if x < 0.5 else "validation" if x < 0.75 else "test")
    assert min(got.count(s) for s in fractions) > 50  # every slice receives its share


def test_listed_paths_are_absolute_in_their_own_terms_or_urls():
    assert labels.is_absolute("/data/a.nii") and labels.is_absolute("s3://b/a.nii")
    assert not labels.is_absolute("sub/a.nii") and not labels.is_absolute("a.nii")
