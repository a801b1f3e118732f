"""JSON log lines (HANDOFF_LOG_FORMAT=json): fields, bound context, extra, exceptions."""

from __future__ import annotations

import io
import json
import logging
import threading

from handoff.telemetry import logs


def _line(record_fn: object) -> dict[str, object]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonFormatter())
    logger = logging.getLogger("handoff.test-json")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    try:
        record_fn(logger)  # type: ignore[operator]
    finally:
        logger.removeHandler(handler)
    text = stream.getvalue()
    assert text.count("\n") == 1, text  # one object, one line
    parsed: dict[str, object] = json.loads(text)
    return parsed


def test_a_record_is_one_json_object_with_time_level_logger_and_message() -> None:
    line = _line(lambda log: log.warning("quarantined %s", "invoice-42"))
    assert line["level"] == "WARNING" and line["logger"] == "handoff.test-json"
    assert line["message"] == "quarantined invoice-42"
    assert str(line["time"]).endswith("+00:00")
    assert "traceId" not in line  # no span: no ids, rather than empty ones


def test_bound_fields_and_extra_ride_along_and_unbind_after_the_block() -> None:
    def write(log: logging.Logger) -> None:
        with (
            logs.bound(tenant="acme", documentId="invoice-42", eventId=None),
            logs.bound(eventId="e-7"),  # inner binds win
        ):
            log.info("handled", extra={"consumer": "billing"})

    line = _line(write)
    assert (line["tenant"], line["documentId"], line["eventId"]) == ("acme", "invoice-42", "e-7")
    assert line["consumer"] == "billing"
    assert logs.current_fields() == {}


def test_bound_fields_stay_in_their_thread() -> None:
    seen: list[object] = []
    with logs.bound(tenant="acme"):
        worker = threading.Thread(target=lambda: seen.append(dict(logs.current_fields())))
        worker.start()
        worker.join()
    assert seen == [{}]


def test_an_exception_is_one_field_of_the_same_line() -> None:
    def write(log: logging.Logger) -> None:
        try:
            raise ValueError("bad payload\nsecond line")
        except ValueError:
            log.exception("unit failed")

    line = _line(write)
    assert "ValueError: bad payload" in str(line["exception"])


def test_configure_leaves_a_foreign_handler_alone_and_replaces_its_own() -> None:
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    try:
        for handler in saved:
            root.removeHandler(handler)
        logs.configure(logging.INFO, "json")
        logs.configure(logging.INFO, "json")
        ours = [h for h in root.handlers if getattr(h, "_handoff", False)]
        assert len(ours) == 1 and isinstance(ours[0].formatter, logs.JsonFormatter)
        root.removeHandler(ours[0])
        foreign = logging.NullHandler()
        root.addHandler(foreign)
        logs.configure(logging.INFO, "text")
        assert root.handlers == [foreign]
        root.removeHandler(foreign)
    finally:
        for handler in saved:
            root.addHandler(handler)
        root.setLevel(level)
