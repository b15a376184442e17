"""How FT.* index definitions are logged, replayed and snapshotted.

An index is logged as the FT.CREATE that made it (``FT.CREATE`` record: index, args)
and an ``FT.DROPINDEX`` record; the index structures are never written. Replay (or a
snapshot, which lists the hashes first and the definitions after) re-runs FT.CREATE,
which scans the hashes under the index's prefixes: the index is rebuilt at start-up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pion.server.persist.records import RecordType

if TYPE_CHECKING:
    from pion.server.persist.manager import Persistence
    from pion.server.search.store import SearchStore

SEARCH_KINDS: dict[str, RecordType] = {"create": RecordType.FT_CREATE, "drop": RecordType.FT_DROPINDEX}
SEARCH_TYPES = frozenset(SEARCH_KINDS.values())


def search_journal(persist: Persistence) -> Callable[[str, Mapping[str, Any]], None]:
    """The SearchStore's ``on_mutation`` hook: one WAL record per created/dropped index."""
    append = persist.append

    def record(kind: str, fields: Mapping[str, Any]) -> None:
        append(SEARCH_KINDS[kind], fields)
    return record


def apply_search_record(search: SearchStore, rtype: int, f: dict[str, Any]) -> None:
    if rtype == RecordType.FT_CREATE:
        search.restore_create(f["index"], [bytes(a) for a in f["args"]])
    else:
        search.restore_drop(f["index"])


def search_snapshot_records(search: SearchStore) -> Iterator[tuple[RecordType, dict[str, Any]]]:
    for name, index in list(search.indexes.items()):
        yield RecordType.FT_CREATE, {"index": name, "args": list(index.definition.args)}
