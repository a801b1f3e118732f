"""Query strings with one meaning: only the parameters an operation declares, each once.

FastAPI ignores a parameter it does not know (``?limt=5`` silently means the
default page size) and takes one of several values given for the same name.
The API answers both with 422 instead, so a typo or a crafted duplicate is
an error the caller sees rather than a request quietly read another way.
"""

from __future__ import annotations

from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from handoff.core.errors import InvalidRequest

_DECLARED: dict[int, frozenset[str]] = {}


def _query_names(dependant: Dependant) -> set[str]:
    names = {param.alias for param in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


def _declared(route: APIRoute) -> frozenset[str]:
    found = _DECLARED.get(id(route))
    if found is None:  # once per route: the routes live as long as the app
        found = _DECLARED[id(route)] = frozenset(_query_names(route.dependant))
    return found


async def declared_query_only(request: Request) -> None:
    """A router dependency: 422 for an unknown or repeated query parameter."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    names = [name for name, _ in request.query_params.multi_items()]
    unknown = sorted(set(names) - _declared(route))
    if unknown:
        shown = ", ".join(repr(name[:40]) for name in unknown[:5])
        raise InvalidRequest(f"unknown query parameter(s) {shown}; see /docs for this operation")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise InvalidRequest(f"query parameter(s) {', '.join(repeated)} given more than once")
