"""What a failed publish to JetStream means: nats-py's own errors, as the publisher and the heartbeat meet them."""

from __future__ import annotations

import pytest
from ringtrace.collector.jetstream.stream_readiness import publish_failure

nats_errors = pytest.importorskip("nats.errors")
js_errors = pytest.importorskip("nats.js.errors")


def test_a_retry_the_stream_finds_in_process_says_the_stream_has_no_quorum_then_what_it_answered() -> None:
    exc = js_errors.APIError(code=409, description="duplicate message id is in process", err_code=10158)
    said = publish_failure(exc, 2.0)
    assert said.startswith("the stream has not stored an earlier attempt of this message yet")
    assert "quorum" in said and said.endswith("(409 duplicate message id is in process)")


@pytest.mark.parametrize(
    ("exc", "meaning"),
    [
        (nats_errors.TimeoutError(), "no answer from the stream within 2 s: too few of its replicas answer"),
        (js_errors.NoStreamResponseError(), "no server answers for the stream"),
        (js_errors.ServiceUnavailableError(code=503, description="JetStream not enabled"), "no server answers"),
        (nats_errors.ConnectionClosedError(), "not connected to any NATS server"),
        (js_errors.APIError(code=500, description="raft failure"), "the stream answered 500: raft failure"),
    ],
)
def test_each_failure_says_what_it_means_then_what_nats_said(exc: Exception, meaning: str) -> None:
    said = publish_failure(exc, 2.0)
    assert said.startswith(meaning) and said.endswith(f"({type(exc).__name__}: {exc})"), said


def test_an_error_it_does_not_know_is_said_as_it_is() -> None:
    assert publish_failure(ValueError("odd"), 2.0) == "ValueError: odd"
