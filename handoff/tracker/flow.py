"""The stage order of a flow, learned from the changes of owner seen so far.

Nobody configures the pipeline: the edges (from owner, to owner, how often)
are folded from the outbox, and the order is read off them. Work can go
back (a rejected review returns to routing), so the edges form a graph with
cycles; the order is that of the graph without its back edges, found by a
depth-first walk from creation that follows the busiest edges first. A stage
then sits at its longest distance from creation, ties broken by traffic.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

CREATED = ""  # from '' is a creation; to '' a completion

Edge = tuple[str, str, int]  # from owner, to owner, how many documents


def stage_order(edges: Iterable[Edge], also: Iterable[str] = ()) -> list[str]:
    """Owners in flow order; ``also`` are owners with work but no edge yet (last, by name)."""
    return list(stage_columns(edges, also))


def stage_columns(edges: Iterable[Edge], also: Iterable[str] = ()) -> dict[str, int]:
    """Owners in flow order, each with its column: its longest distance from creation
    (1 for the first stages). Owners in ``also`` without an edge come last, in column 1."""
    edges = list(edges)
    out: dict[str, list[tuple[int, str]]] = defaultdict(list)
    traffic: dict[str, int] = defaultdict(int)
    for source, target, n in edges:
        out[source].append((n, target))
        traffic[target] += n
    for targets in out.values():
        targets.sort(key=lambda t: (-t[0], t[1]))

    # Iterative DFS (a long pipeline must not hit the recursion limit):
    # an edge to a node still on the path is a back edge and is dropped.
    forward: dict[str, list[str]] = defaultdict(list)
    state: dict[str, int] = {}  # 1 on the path, 2 done
    roots = [CREATED, *sorted({s for s in out if s != CREATED}, key=lambda o: (-traffic[o], o))]
    for root in roots:
        if root in state:
            continue
        state[root] = 1
        stack = [(root, iter(out[root]))]
        while stack:
            node, pending = stack[-1]
            step = next(pending, None)
            if step is None:
                state[node] = 2
                stack.pop()
                continue
            target = step[1]
            if target == CREATED or state.get(target) == 1:
                continue  # back to creation or to a stage on the path: a loop
            forward[node].append(target)
            if target not in state:
                state[target] = 1
                stack.append((target, iter(out[target])))

    depth = _longest_distance(forward, roots)
    owners = {o for o in depth if o != CREATED}
    ordered = sorted(owners, key=lambda o: (depth[o], -traffic[o], o))
    rest = sorted(set(also) - owners - {CREATED})
    # An owner no creation leads to (work arrived before the fold began) is a root:
    # it sits at depth 0, beside creation; the first stages are 1 and on.
    columns = {owner: max(depth[owner], 1) for owner in ordered}
    return {**columns, **dict.fromkeys(rest, 1)}


def _longest_distance(forward: dict[str, list[str]], roots: list[str]) -> dict[str, int]:
    """Longest path length from any root, over an acyclic graph (Kahn's order)."""
    nodes = set(roots) | set(forward) | {t for ts in forward.values() for t in ts}
    incoming: dict[str, int] = dict.fromkeys(nodes, 0)
    for targets in forward.values():
        for target in targets:
            incoming[target] += 1
    depth = dict.fromkeys(nodes, 0)
    ready = sorted(n for n in nodes if incoming[n] == 0)
    while ready:
        node = ready.pop()
        for target in forward.get(node, ()):
            depth[target] = max(depth[target], depth[node] + 1)
            incoming[target] -= 1
            if incoming[target] == 0:
                ready.append(target)
    return depth


def next_owners(edges: Iterable[Edge], owner: str) -> list[str]:
    """Where an owner's work goes, most often first."""
    targets = sorted((-n, target) for source, target, n in edges if source == owner)
    return [target for _, target in targets]
