"""The custom-map search index's entries of one job, built on the enqueue
path from the request's proto map (the store never sees protobuf types).

Each entry is (job id, key, the value as text: ``sepp.storage.search.value_text``); an
entry whose key or text is longer than ``MAX_TERM_BYTES`` or holds NUL is left out
(``search.indexable``): a search cannot ask for it either.
"""

from __future__ import annotations

from collections.abc import Mapping

from sepp.api.v1 import common_pb2 as pb
from sepp.storage.search import CustomEntry, indexable, value_text


def index_entries(job_id: bytes, custom: Mapping[str, pb.CustomValue]) -> list[CustomEntry]:
    """The entries of a job with id ``job_id`` (16 bytes) and custom map ``custom`` (validated:
    every value has a kind). About 0.5 µs an entry; called only for jobs with a custom map."""
    out: list[CustomEntry] = []
    for key, value in custom.items():
        kind = value.WhichOneof("kind")
        if kind is None:
            continue
        text = value_text(getattr(value, kind))
        if indexable(key, text):
            out.append((job_id, key, text))
    return out
