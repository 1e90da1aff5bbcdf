import pytest

from lampe_eval.lengths import BadLengthError, format_length, parse_length, parse_lengths


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("4096", 4096),
        ("4k", 4096),
        ("64K", 65536),
        ("128k", 131072),
        (" 16k ", 16384),
        ("1.5k", 1536),
        (12, 12),
    ],
)
def test_parse_length_accepts_common_forms(text, tokens):
    assert parse_length(text) == tokens


@pytest.mark.parametrize("text", ["", "k", "4q", "-4k", "0", "4kk", "1.3k", "four", "4 k b"])
def test_parse_length_rejects_garbage(text):
    with pytest.raises(BadLengthError):
        parse_length(text)


def test_parse_lengths_splits_commas_and_repeats_and_dedups():
    assert parse_lengths(["4k,8k", "8k", "16k"]) == [4096, 8192, 16384]
    with pytest.raises(BadLengthError):
        parse_lengths([","])


def test_format_length():
    assert format_length(16384) == "16k"
    assert format_length(1000) == "1000"
