"""The DynamoDB design's cost model: item sizes by DynamoDB's rules, the units one handoff
consumes, and the arithmetic from units to ceilings and dollars (pure functions)."""

from __future__ import annotations

import math

from benchmarks.dynamodb_model import Prices, handoff_items, item_size, model


def test_item_size_follows_dynamodbs_rules() -> None:
    # names + values: "PK"+"ab", "n" + 5 digits (3+1), "b" + 3 raw bytes, "t" + bool, no None
    assert item_size({"PK": "ab", "n": 12345, "b": b"xyz", "t": True, "gone": None}) == 15
    assert item_size({"s": "é"}) == 3  # UTF-8 bytes
    assert item_size({"m": {"a": 1}}) == 1 + 3 + (1 + 2 + 1)


def test_one_handoff_without_data_fits_a_kilobyte_per_item() -> None:
    sizes = {n: item_size(v) for n, v in handoff_items(0, due=False).items()}
    assert all(size <= 1024 for size in sizes.values()), sizes
    found = model(0)
    # state, event, receipt and two count shards, each 2 units per KB in a transaction
    assert found.write_units_table == 2 * (1 + 1 + 1 + 2)
    assert found.write_units_indexes == 2  # the ByOwner entry deleted and put again
    assert found.uniform_ceiling_per_s == 40_000 / 10
    assert found.hot_owner_ceiling_per_s == 1000
    assert found.count_item_ceiling_per_s == 500 and found.count_shards_ceiling_per_s == 8000
    assert found.counts_read_units == 50 * 16 and found.counts_calls == 8


def test_data_and_deadlines_raise_the_units_and_prices_scale_the_cost() -> None:
    large = model(2048)
    state_kb = math.ceil(item_size(handoff_items(2048, due=False)["state"]) / 1024)
    assert state_kb == 3 and large.hot_owner_ceiling_per_s == 1000 / 3
    assert model(0, due=True).write_units_indexes == 4  # ByOwnerDue moves too
    cheap, dear = model(0, prices=Prices(write_per_million=1.0)), model(
        0, prices=Prices(write_per_million=2.0))  # fmt: skip
    assert dear.cost_per_million["writes"] == 2 * cheap.cost_per_million["writes"] == 24.0
    total = cheap.cost_per_million
    assert math.isclose(total["total"], sum(v for n, v in total.items() if n != "total"))
