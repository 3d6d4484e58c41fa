"""The old extension point `vidvol.builders.beam_writer` still serves user builders, and says where the names went."""

import importlib
import sys

import pytest

from vidvol.builders import dataset_builder
from vidvol.builders import example_io
from vidvol.builders.writer import skip_report


def test_importing_the_old_module_warns_naming_the_new_one_and_hands_on_the_same_names():
    sys.modules.pop("vidvol.builders.beam_writer", None)
    with pytest.warns(DeprecationWarning, match=r"vidvol\.builders\.dataset_builder") as caught:
        old = importlib.import_module("vidvol.builders.beam_writer")
    assert any("vidvol.builders.example_io" in str(w.message) for w in caught)
    assert old.StreamingBeamBuilder is dataset_builder.StreamingBeamBuilder
    assert old.ExamplesFromSources is dataset_builder.ExamplesFromSources
    assert old.Skip is example_io.Skip
    assert old.read_skip_report is skip_report.read_skip_report
    assert all(hasattr(old, name) for name in old.__all__)


def test_a_user_builder_written_against_the_old_module_still_is_a_streaming_builder():
    with pytest.warns(DeprecationWarning):
        sys.modules.pop("vidvol.builders.beam_writer", None)
        old = importlib.import_module("vidvol.builders.beam_writer")

    class UserBuilder(old.StreamingBeamBuilder, skip_registration=True):
        """What a user's builder subclassing the old name looks like."""

    assert issubclass(UserBuilder, dataset_builder.StreamingBeamBuilder)
    gen = old.ExamplesFromSources([("a", 1)], lambda record: iter([old.Skip(source="a", reason="r")]))
    assert isinstance(gen, dataset_builder.ExamplesFromSources)
