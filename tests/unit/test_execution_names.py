"""Execution names of workflow starts: valid for Step Functions' rule for any id the
naming rule allows, deterministic, and distinct for distinct (document, event) pairs."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from handoff.consumers.workflows import NAME, execution_name
from handoff.core.names import ID_MAX, id_problem

ids = st.text(min_size=1, max_size=ID_MAX).filter(lambda v: id_problem(v) is None)


@settings(max_examples=400)
@given(document_id=ids, event_id=ids)
def test_any_allowed_id_gives_a_valid_deterministic_name(document_id: str, event_id: str) -> None:
    name = execution_name(document_id, event_id)
    assert NAME.match(name), name
    assert len(name) <= 80
    assert execution_name(document_id, event_id) == name


@given(document_id=ids, a=ids, b=ids)
def test_other_events_of_a_document_give_other_names(document_id: str, a: str, b: str) -> None:
    if a != b:
        assert execution_name(document_id, a) != execution_name(document_id, b)


def test_unicode_and_long_ids_keep_a_readable_prefix_and_stay_apart() -> None:
    long_a, long_b = "invoice-" + "x" * 300 + "a", "invoice-" + "x" * 300 + "b"
    assert execution_name(long_a, "e") != execution_name(long_b, "e")
    assert execution_name("facture-été-42", "e").startswith("facture-ete-42-")
    assert execution_name("請求書", "e").startswith("doc-")
    assert execution_name("a/b c", "e").startswith("a-b-c-")
