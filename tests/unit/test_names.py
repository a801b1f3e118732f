"""The naming rule (handoff/core/names.py) as pure logic."""

from __future__ import annotations

import sys
import unicodedata

import pytest

from handoff.core.names import forbidden, id_problem, label_problem, service_name_problem

CATEGORIES = ("Cc", "Cf", "Cs", "Co", "Zs", "Zl", "Zp")


def test_the_explicit_list_covers_every_such_character_this_python_knows() -> None:
    missing = [
        f"U+{cp:04X}"
        for cp in range(sys.maxunicode + 1)
        if unicodedata.category(chr(cp)) in CATEGORIES and not forbidden(cp)
    ]
    assert missing == []


@pytest.mark.parametrize("name", ["review", "a", "x.y_z-1", "0ops", "a" * 63])
def test_good_service_names(name: str) -> None:
    assert service_name_problem(name) is None


@pytest.mark.parametrize("name", ["aworker\n", "", "Review", "-a", "a b", "a" * 64, "ü", "a/b"])
def test_bad_service_names(name: str) -> None:
    assert service_name_problem(name) is not None


@pytest.mark.parametrize("value", ["invoice-42", "請求書-42", "a?b#c%", "é", "🧾", "x" * 200])
def test_good_ids(value: str) -> None:
    assert id_problem(value) is None


@pytest.mark.parametrize(
    "value", ["", "nl\n", "a b", "a/b", ".", "..", "e\u0301", "x" * 201, "a\u202eb", "\ud800"]
)
def test_bad_ids(value: str) -> None:
    assert id_problem(value) is not None


def test_labels_allow_inner_spaces_and_slashes_only() -> None:
    assert label_problem("waiting for a/b review") is None
    for bad in (" lead", "trail ", "tab\there", "x" * 65, "", "bidi\u202e"):
        assert label_problem(bad) is not None, bad
