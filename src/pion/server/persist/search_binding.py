"""How FT.* index definitions are logged, replayed and snapshotted.

An index is logged as the FT.CREATE that made it (``FT.CREATE`` record: index, args)
and an ``FT.DROPINDEX`` record. Replay re-runs FT.CREATE and the index is rebuilt from the
hashes after the replay. A snapshot lists the hashes, then the definitions, then for each
index whose one VECTOR field is HNSW an ``FT.GRAPH`` record (hnswlib's graph file, the doc
ids and keys): loading it replaces the graph build, the slow part of a rebuild.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pion.server.persist.records import RecordType

if TYPE_CHECKING:
    from pion.server.persist.manager import Persistence
    from pion.server.search.store import SearchStore

SEARCH_KINDS: dict[str, RecordType] = {"create": RecordType.FT_CREATE, "drop": RecordType.FT_DROPINDEX}
SEARCH_TYPES = frozenset({*SEARCH_KINDS.values(), RecordType.FT_GRAPH})


def search_journal(persist: Persistence) -> Callable[[str, Mapping[str, Any]], None]:
    """The SearchStore's ``on_mutation`` hook: one WAL record per created/dropped index."""
    append = persist.append

    def record(kind: str, fields: Mapping[str, Any]) -> None:
        append(SEARCH_KINDS[kind], fields)
    return record


def apply_search_record(search: SearchStore, rtype: int, f: dict[str, Any]) -> None:
    if rtype == RecordType.FT_CREATE:
        search.restore_create(f["index"], [bytes(a) for a in f["args"]])
    elif rtype == RecordType.FT_GRAPH:
        search.restore_graph(f["index"], f["field"], list(f["docs"]), [bytes(k) for k in f["keys"]],
                             bytes(f["graph"]))
    else:
        search.restore_drop(f["index"])


def search_snapshot_records(search: SearchStore) -> Iterator[tuple[RecordType, dict[str, Any]]]:
    for name, index in list(search.indexes.items()):
        yield RecordType.FT_CREATE, {"index": name, "args": list(index.definition.args)}
    # Every graph at one instant, after all hashes: a hash written since the snapshot began is
    # in the WAL too, and its replay re-indexes it over the loaded graph.
    for name, field, docs, keys, graph in search.graph_records():
        yield RecordType.FT_GRAPH, {"index": name, "field": field, "docs": docs, "keys": keys, "graph": graph}
