"""A poll's batches: the next one decoded while this one's unit runs, units and offsets in order.

Fakes built on the production interfaces stand in for Kafka's messages and
consumer, the decoder and the unit (the runtime's ``_run_batch``): what is
checked is the runtime's own scheduling, which the integration tests (kills
mid-batch, ordering) exercise end to end against the real parts.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, cast

from confluent_kafka import TIMESTAMP_CREATE_TIME

from handoff.consumers import Consumer
from handoff.consumers.decoding import Decoder
from handoff.consumers.event import Position
from handoff.consumers.runtime import AHEAD, Runtime, screen
from handoff.consumers.settings import ConsumerSettings
from handoff.consumers.units import Item
from handoff.core.errors import MalformedEvent
from handoff.core.settings import HandoffSettings

UNIT_S = 0.05


class FakeMessage:
    """The part of confluent_kafka.Message the runtime reads."""

    def __init__(self, offset: int, *, tenant: str = "acme") -> None:
        self._offset = offset
        self._headers = [("eventType", b"routed"), ("tenant", tenant.encode()),
                         ("owner", b"review")]  # fmt: skip

    def headers(self) -> list[tuple[str, bytes]]:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        return TIMESTAMP_CREATE_TIME, 1_700_000_000_000

    def topic(self) -> str:
        return "handoff.events"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return b"doc"

    def value(self) -> bytes:
        return b"\x00\x00\x00\x00\x01body"


class FakeDecoder:
    """Records when and on which thread each message was decoded."""

    def __init__(self) -> None:
        self.decoded: dict[int, tuple[str, float, float]] = {}
        self.in_use = threading.Lock()

    def decode(self, value: bytes | None, position: Position) -> Any:
        with self.in_use:
            began = time.monotonic()
            time.sleep(0.002)
            self.decoded[position.offset] = (threading.current_thread().name, began,
                                             time.monotonic())  # fmt: skip
        raise MalformedEvent("fake: every message is malformed, so each is an Item")


class FakeKafka:
    def __init__(self) -> None:
        self.stored: list[int] = []

    def store_offsets(self, *, offsets: list[Any]) -> None:
        self.stored += [tp.offset for tp in offsets]


def _runtime(batch_size: int) -> tuple[Runtime, list[tuple[list[int], float, float]]]:
    app = Consumer("review", "hsvc_0123456789ab." + "s" * 43)
    app.add_handler("routed", lambda e, tx: None)
    runtime = Runtime(app, HandoffSettings(), ConsumerSettings(batch_size=batch_size))
    runtime.tenant = "acme"
    runtime._decoding = ThreadPoolExecutor(1, thread_name_prefix="decode")
    units: list[tuple[list[int], float, float]] = []

    def unit(items: list[Item]) -> None:  # the database's time: no interpreter lock held
        began = time.monotonic()
        time.sleep(UNIT_S)
        units.append(([i.position.offset for i in items], began, time.monotonic()))

    runtime._run_batch = unit  # type: ignore[method-assign]
    return runtime, units


def _poll(runtime: Runtime, offsets: range, tenant: str = "acme") -> tuple[list[Any], list[Any]]:
    msgs = [FakeMessage(n, tenant=tenant) for n in offsets]
    size = runtime.config.batch_size
    chunks = [msgs[i : i + size] for i in range(0, len(msgs), size)]
    screened = [[p for m in chunk if (p := screen(cast(Any, m), runtime.app, "acme")) is not None]
                for chunk in chunks]  # fmt: skip
    return chunks, screened


def test_fake_decoder_the_next_batch_is_decoded_while_the_unit_before_runs() -> None:
    runtime, units = _runtime(batch_size=5)
    decoder, kafka = FakeDecoder(), FakeKafka()
    chunks, screened = _poll(runtime, range(20))

    assert runtime._batches(cast(Any, kafka), chunks, screened, cast(Decoder, decoder))

    # Units in order, each its own batch; each batch's offsets stored after its unit.
    assert [offsets for offsets, _, _ in units] == [list(range(n, n + 5)) for n in (0, 5, 10, 15)]
    assert kafka.stored == [5, 10, 15, 20]
    # The first batch is decoded before anything runs; every later one on the decode
    # thread, started before the unit ahead of it had finished.
    assert {decoder.decoded[n][0] for n in range(5)} == {threading.current_thread().name}
    for n, (_, _, unit_end) in enumerate(units[:-1]):
        following = [decoder.decoded[o] for o in range(5 * (n + 1), 5 * (n + 2))]
        assert all(thread.startswith("decode") for thread, _, _ in following)
        assert min(began for _, began, _ in following) < unit_end
    runtime._decoding.shutdown()  # type: ignore[union-attr]


def test_fake_decoder_a_stop_leaves_the_rest_unrun_and_the_decoder_unused() -> None:
    runtime, units = _runtime(batch_size=5)
    decoder, kafka = FakeDecoder(), FakeKafka()
    chunks, screened = _poll(runtime, range(20))
    first_unit = runtime._run_batch

    def unit_then_stop(items: list[Item]) -> None:
        first_unit(items)
        runtime.stopping.set()

    runtime._run_batch = unit_then_stop  # type: ignore[method-assign]
    assert runtime._batches(cast(Any, kafka), chunks, screened, cast(Decoder, decoder))

    assert [offsets for offsets, _, _ in units] == [[0, 1, 2, 3, 4]]
    assert kafka.stored == [5]  # the rest is redelivered to whoever takes the partition
    assert sorted(decoder.decoded) == list(range(10))  # the batch ahead, no further
    # The batch decoded ahead was waited for: nothing decodes after _batches returns.
    assert decoder.in_use.acquire(blocking=False)
    decoded = len(decoder.decoded)
    time.sleep(0.05)
    assert len(decoder.decoded) == decoded
    runtime._decoding.shutdown()  # type: ignore[union-attr]


def test_fake_decoder_batches_the_header_filter_leaves_empty_still_store_their_offsets() -> None:
    runtime, units = _runtime(batch_size=5)
    decoder, kafka = FakeDecoder(), FakeKafka()
    others, other_screened = _poll(runtime, range(0, 5), tenant="other")
    ours, our_screened = _poll(runtime, range(5, 10))
    chunks, screened = others + ours, other_screened + our_screened
    assert screened[0] == []  # another tenant's events: filtered by their headers

    assert runtime._batches(cast(Any, kafka), chunks, screened, cast(Decoder, decoder))

    assert [offsets for offsets, _, _ in units] == [[5, 6, 7, 8, 9]]
    assert kafka.stored == [5, 10]
    assert sorted(decoder.decoded) == [5, 6, 7, 8, 9]
    runtime._decoding.shutdown()  # type: ignore[union-attr]


class FakePollingKafka:
    """Answers ``consume`` with as many messages as asked for, recording the sizes."""

    def __init__(self) -> None:
        self.asked: list[int] = []
        self.offset = 0

    def consume(self, size: int, timeout: float) -> list[Any]:
        self.asked.append(size)
        msgs = [FakeMessage(n) for n in range(self.offset, self.offset + size)]
        self.offset += size
        return msgs


def test_fake_kafka_a_poll_takes_four_batches_only_once_units_are_measured_quick() -> None:
    runtime, _ = _runtime(batch_size=100)
    kafka = FakePollingKafka()
    poll = partial(runtime._poll, cast(Any, kafka))
    prefetch = runtime.config.prefetch
    assert len(poll()) == max(100, prefetch)  # nothing measured yet: as before
    runtime._unit_took(0.05, 100)  # 0.5 ms an event: four batches take 0.2 s
    assert len(poll()) == 100 * AHEAD
    # Handlers grow slow: four batches would near max.poll.interval.ms, so one again.
    for _ in range(30):
        runtime._unit_took(10.0, 100)
    assert len(poll()) == max(100, prefetch)
    assert kafka.asked == [max(100, prefetch), 100 * AHEAD, max(100, prefetch)]
    runtime._decoding.shutdown()  # type: ignore[union-attr]
