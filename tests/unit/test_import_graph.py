"""The file-to-file import graph of ``src/sepp`` has no cycle.

A cycle between modules means none of them can be read, tested or changed on its own (a
class split across files that reach into each other). The graph is grimp's, the one
``lint-imports`` checks the layer contracts on, with every import counted — the ones under
``if TYPE_CHECKING:`` too, since a reader follows them all the same.
"""

from __future__ import annotations

import functools

import grimp


def import_cycles(graph: grimp.ImportGraph) -> list[frozenset[str]]:
    """The strongly connected components of ``graph``'s direct imports between its modules
    that hold a cycle (two or more modules, or one importing itself), each as a set of
    module names, sorted (Tarjan's algorithm, iterative: no recursion limit)."""
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & graph.modules) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[frozenset[str]] = []
    for root in modules:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if i < len(edges[node]):
                work.append((node, i + 1))
                nxt = edges[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if work:  # done with node: hand its low link to the parent
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1 or node in edges[node]:
                    cycles.append(frozenset(component))
    return sorted(cycles, key=sorted)


def test_the_cycle_finder_finds_a_cycle_and_only_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for name in ("a", "a.x", "a.y", "a.z", "a.w"):
        graph.add_module(name)
    for importer, imported in (("a.x", "a.y"), ("a.y", "a.z"), ("a.z", "a.x"), ("a.w", "a.x")):
        graph.add_import(importer=importer, imported=imported)
    assert import_cycles(graph) == [frozenset({"a.x", "a.y", "a.z"})]


@functools.cache
def sepp_cycles() -> tuple[frozenset[str], ...]:
    """The import cycles of ``src/sepp`` (built once per test process)."""
    return tuple(import_cycles(grimp.build_graph("sepp")))


def test_src_sepp_has_no_import_cycle() -> None:
    cycles = [sorted(c) for c in sepp_cycles()]
    assert cycles == [], f"import cycles between modules of src/sepp: {cycles}"
