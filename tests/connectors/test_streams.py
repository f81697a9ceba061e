import re

from hypothesis import given, settings
from hypothesis import strategies as st

from connectors import streams
from connectors.streams import SseEvent, looks_like_sse, parse_ndjson, parse_sse


def test_sse_reads_event_name_data_and_id() -> None:
    transcript = parse_sse(b'event: response.created\ndata: {"a":1}\nid: 7\n\n')
    assert transcript.events == [SseEvent("response.created", '{"a":1}', "7")]
    assert transcript.events[0].json() == {"a": 1}


def test_sse_joins_multi_line_data_with_newline() -> None:
    transcript = parse_sse(b"data: first\ndata: second\ndata:third\n\n")
    assert transcript.events == [SseEvent("message", "first\nsecond\nthird")]


def test_sse_tolerates_crlf_and_bare_cr_line_endings() -> None:
    crlf = parse_sse(b"event: a\r\ndata: 1\r\n\r\nevent: b\r\ndata: 2\r\n\r\n")
    cr = parse_sse(b"event: a\rdata: 1\r\revent: b\rdata: 2\r\r")
    expected = [SseEvent("a", "1"), SseEvent("b", "2")]
    assert crlf.events == expected
    assert cr.events == expected


def test_sse_ignores_but_counts_comment_lines() -> None:
    raw = b": keep-alive\n\ndata: x\n\n: keep-alive\n:HTTP_STATUS/200\n\n"
    transcript = parse_sse(raw)
    assert transcript.events == [SseEvent("message", "x")]
    assert transcript.comments == ["keep-alive", "keep-alive", "HTTP_STATUS/200"]


def test_sse_drops_events_without_data() -> None:
    assert parse_sse(b"event: ping\n\ndata: y\n\n").events == [SseEvent("message", "y")]


def test_sse_last_event_id_carries_over() -> None:
    events = parse_sse(b"id: 1\ndata: a\n\ndata: b\n\n").events
    assert [e.id for e in events] == ["1", "1"]


def test_sse_keeps_value_spaces_after_the_first() -> None:
    assert parse_sse(b"data:   padded\n\n").events[0].data == "  padded"


def test_sse_reports_an_event_cut_before_its_blank_line() -> None:
    transcript = parse_sse(b'data: done\n\nevent: response.output_text.delta\ndata: {"del')
    assert transcript.events == [SseEvent("message", "done")]
    assert transcript.unterminated == SseEvent("response.output_text.delta", '{"del')


def test_sse_survives_a_multibyte_character_cut_in_half() -> None:
    raw = "data: 你好\n\ndata: 世".encode()[:-1]
    transcript = parse_sse(raw)
    assert transcript.events[0].data == "你好"
    assert transcript.unterminated is not None


def test_sse_strips_bom_and_reads_retry_hint() -> None:
    transcript = parse_sse(b"\xef\xbb\xbfretry: 1500\ndata: x\n\n")
    assert transcript.retry_ms == 1500
    assert transcript.events == [SseEvent("message", "x")]


def test_sse_field_without_colon_is_a_name_with_empty_value() -> None:
    assert parse_sse(b"data\n\n").events == [SseEvent("message", "")]


def test_looks_like_sse() -> None:
    assert looks_like_sse(b"event: x\ndata: y\n\n")
    assert looks_like_sse(b": keep-alive\n")
    assert not looks_like_sse(b'{"id": 1}')
    assert not looks_like_sse(b"<!DOCTYPE html>")


def test_ndjson_reads_objects_and_keeps_bad_lines() -> None:
    transcript = parse_ndjson(b'{"a":1}\r\n\n{"done":true}\nnot json\n')
    assert transcript.objects == [{"a": 1}, {"done": True}]
    assert transcript.invalid_lines == ["not json"]
    assert transcript.ends_with_newline


def test_ndjson_notices_a_cut_last_line() -> None:
    transcript = parse_ndjson(b'{"a":1}\n{"message":')
    assert transcript.objects == [{"a": 1}]
    assert not transcript.ends_with_newline


def _reference_sse(raw: bytes) -> streams.SseTranscript:
    """The WHATWG rules written plainly, line by line, to check the optimised reader against."""
    text = raw.decode("utf-8", errors="replace").removeprefix("\ufeff")
    lines = re.split(r"\r\n|\r|\n", text)
    if lines[-1] == "":
        lines.pop()
    transcript = streams.SseTranscript()
    event, opened, last_id = "", False, None
    data: list[str] = []
    for line in lines:
        if line == "":
            if data:
                joined = "\n".join(data)
                transcript.events.append(streams.SseEvent(event or "message", joined, last_id))
            event, data, opened = "", [], False
        elif line.startswith(":"):
            transcript.comments.append(line[1:].strip())
        else:
            name, colon, value = line.partition(":")
            value = value.removeprefix(" ") if colon else ""
            opened = True
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)
            elif name == "id" and "\x00" not in value:
                last_id = value
            elif name == "retry" and value.isdigit():
                transcript.retry_ms = int(value)
    if opened:
        transcript.unterminated = streams.SseEvent(event or "message", "\n".join(data), last_id)
    return transcript


_SSE_PIECES = st.sampled_from(
    ["data:", "data: ", "event:", "event: x", "id:", "id: 7", "retry: 15", ":", ": keep", "x",
     '{"a": [1]}', " ", "\x00", "é", "\ufeff", "\n", "\r", "\r\n", "\n\n", ":", "data"]
)  # fmt: skip


@settings(deadline=None, max_examples=400)
@given(st.lists(_SSE_PIECES, max_size=40), st.integers(min_value=0, max_value=3))
def test_sse_reader_agrees_with_the_plain_rules(pieces: list[str], cut: int) -> None:
    raw = "".join(pieces).encode()
    raw = raw[: len(raw) - cut]  # sometimes mid-character
    assert streams.parse_sse(raw) == _reference_sse(raw)
