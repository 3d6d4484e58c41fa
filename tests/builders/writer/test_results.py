"""Split results: why a split is empty, in plain words."""

from vidvol.builders.writer import results


def test_why_empty_words_missing_files():
    result = results.SplitResult("test", [], [], 0, [], [
        {"source": "a", "reason": "FileNotFoundError: a: not found", "split": "test", "example": ""},
        {"source": "b", "reason": "FileNotFoundError: b: not found", "split": "test", "example": ""},
        {"source": "c", "reason": "ValueError: c: bad", "split": "test", "example": ""},
    ], num_sources=3)
    assert result.why_empty() == "every input skipped: 2 missing files, 1 ValueError"
