"""Incremental detokenization (``sim.openai.detokenize``) against decoding all at once.

The engine hands the server one token per step; whatever the bytes, the
streamed pieces must join to the text decoded at once (no U+FFFD for a
character split across tokens, no byte lost), nothing sent may be taken
back, and a stop string must cut the text where vLLM's check cuts it: at the
first token whose text completes a stop string, before the earliest stop
string found then.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sim.openai.detokenize import IncrementalDetokenizer
from sim.openai.tokenizer import NUM_SPECIAL, ByteTokenizer

TOKENIZER = ByteTokenizer()


def stream(
    data: bytes, stop: tuple[str, ...] = (), include_stop: bool = False
) -> tuple[list[str], IncrementalDetokenizer]:
    """``data`` one byte token per push, as the engine emits it; the pieces sent."""
    detokenizer = IncrementalDetokenizer(TOKENIZER, stop, include_stop)
    pieces = []
    for i, byte in enumerate(data):
        delta = detokenizer.push([byte + NUM_SPECIAL], final=i == len(data) - 1)
        pieces.append(delta.text)
        if delta.stop is not None:
            break
    return pieces, detokenizer


@given(st.binary(max_size=60))
def test_streamed_pieces_join_to_the_text_decoded_at_once(data: bytes) -> None:
    pieces, detokenizer = stream(data)
    assert "".join(pieces) == data.decode("utf-8", errors="replace") == detokenizer.text


@given(st.text(max_size=30))
def test_valid_text_streams_without_replacement_characters(text: str) -> None:
    pieces, _ = stream(text.encode())
    assert "".join(pieces) == text  # so no piece decoded a split character as U+FFFD


def test_a_character_goes_out_with_its_last_byte() -> None:
    pieces, _ = stream("aé✓".encode())
    assert pieces == ["a", "", "é", "", "", "✓"]


def test_special_ids_make_no_text() -> None:
    detokenizer = IncrementalDetokenizer(TOKENIZER)
    assert detokenizer.push([0, 1, 2], final=True).text == ""


ASCII = st.text(alphabet="abc", max_size=40)


@given(
    ASCII,
    st.lists(st.text(alphabet="abc", min_size=1, max_size=4), min_size=1, max_size=3),
    st.booleans(),
)
def test_a_stop_string_cuts_where_vllm_cuts(text: str, stop: list[str], include: bool) -> None:
    pieces, detokenizer = stream(text.encode(), tuple(stop), include)
    # The first prefix that contains a stop string; the text is cut before the
    # earliest stop string in it.
    ends = [n for n in range(len(text) + 1) if any(s in text[:n] for s in stop)]
    if ends:
        head = text[: ends[0]]
        cut = min(head.find(s) for s in stop if s in head)
        assert detokenizer.stopped in stop
        kept = cut + len(detokenizer.stopped) if include else cut
        assert detokenizer.text == text[:kept]
        assert not include or detokenizer.text.endswith(detokenizer.stopped)
        assert len(pieces) == ends[0]  # no token after the one that completed it
    else:
        assert detokenizer.text == text and detokenizer.stopped is None
    # What was sent is never taken back, and all of it is sent by the end.
    assert "".join(pieces) == detokenizer.text


def test_text_that_could_start_a_stop_string_is_held_back() -> None:
    detokenizer = IncrementalDetokenizer(TOKENIZER, ("xyz",))
    sent = [detokenizer.push(TOKENIZER.encode(c), final=False).text for c in "abxy"]
    assert sent == ["", "", "a", "b"]  # two characters held: "xy" may become "xyz"
    assert detokenizer.push(TOKENIZER.encode("q"), final=True).text == "xyq"


def test_tokens_after_a_stop_are_ignored() -> None:
    detokenizer = IncrementalDetokenizer(TOKENIZER, ("b",))
    assert detokenizer.push(TOKENIZER.encode("ab"), final=False).stop == "b"
    later = detokenizer.push(TOKENIZER.encode("cd"), final=True)
    assert (later.text, later.stop, detokenizer.text) == ("", None, "a")
