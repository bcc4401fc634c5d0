"""Search filters at the admin edge: their checks, shared by the gRPC
``ListJobs``, the UI and (through the API) the CLI, and the UI search box's syntax.

Checks (``with_search``; each failure is ``InvalidRequest``, INVALID_ARGUMENT with metadata
``field`` / ``limit`` / ``actual``): a job id must be a UUID; an idempotency key at most
``max_idempotency_key_bytes``; an error text 1..``MAX_ERROR_BYTES`` UTF-8 bytes; at most
``MAX_CUSTOM_TERMS`` custom terms, each key and value 1..``MAX_TERM_BYTES`` bytes (a longer
one could never match: the index leaves such entries out).

The search box (``parse_search``): terms separated by spaces, all of which must hold::

    0190a5c2-…              a bare job id
    id:ID                   the same
    key:KEY                 an idempotency key (idempotency_key: too)
    type:NAME               a job type (job_type: too)
    error:TEXT              text in the last error message (A-Z = a-z)
    queue:NAME  state:S     the listing filters (any spelling of a state)
    custom.KEY=VALUE        a custom-map entry; spaces around = allowed: custom.user_id = 42

A value with spaces is double-quoted (``error:"connection refused"``, ``\\"`` and ``\\\\``
inside). Anything else — an unknown field, a bare word that is not a job id, a term
without its value — is refused with a message naming the term.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from sepp.domain.ids import job_id_bytes
from sepp.domain.states import parse_state
from sepp.quoting import quote
from sepp.server.errors import InvalidRequest
from sepp.storage.admin import JobQuery
from sepp.storage.search import MAX_CUSTOM_TERMS, MAX_ERROR_BYTES, MAX_TERM_BYTES

#: Longest search-box text, characters.
MAX_SEARCH_CHARS = 4096
#: The field names of the search box and what they fill.
FIELDS = {"id": "job_id", "job_id": "job_id", "key": "idempotency_key", "idempotency_key": "idempotency_key",
          "type": "job_type", "job_type": "job_type", "error": "error_contains", "queue": "queue",
          "state": "state"}
_UUID = re.compile(r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$")
_HELP = "use id:, key:, type:, error:, queue:, state: or custom.KEY=VALUE (docs/operations.md \"Search\")"


def _nbytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def with_search(query: JobQuery, *, job_id: str = "", idempotency_key: str = "", error_contains: str = "",
                custom: Sequence[tuple[str, str]] = (), max_key_bytes: int = 256) -> JobQuery:
    """``query`` with the search filters given (empty = not given), checked (module
    docstring). Raises ``InvalidRequest`` naming the field."""
    raw_id = None
    if job_id:
        raw_id = job_id_bytes(job_id)
        if raw_id is None:
            raise InvalidRequest(f"job_id {quote(job_id)} is not a UUID", "job_id")
    if idempotency_key and _nbytes(idempotency_key) > max_key_bytes:
        raise InvalidRequest(f"idempotency_key is longer than {max_key_bytes} bytes", "idempotency_key",
                             max_key_bytes, _nbytes(idempotency_key))
    if error_contains and _nbytes(error_contains) > MAX_ERROR_BYTES:
        raise InvalidRequest(f"error_contains is longer than {MAX_ERROR_BYTES} bytes", "error_contains",
                             MAX_ERROR_BYTES, _nbytes(error_contains))
    if len(custom) > MAX_CUSTOM_TERMS:
        raise InvalidRequest(f"a search takes at most {MAX_CUSTOM_TERMS} custom terms", "custom",
                             MAX_CUSTOM_TERMS, len(custom))
    for key, value in custom:
        if not key:
            raise InvalidRequest("a custom term needs a key (custom.KEY=VALUE)", "custom.key")
        if not value:
            raise InvalidRequest(f"custom term {quote(key)} needs a value", "custom.value")
        for what, text in (("key", key), ("value", value)):
            if _nbytes(text) > MAX_TERM_BYTES:
                raise InvalidRequest(f"custom {what} {quote(text)} is longer than {MAX_TERM_BYTES} bytes (longer "
                                     "entries are not indexed)", f"custom.{what}", MAX_TERM_BYTES, _nbytes(text))
    return replace(query, job_id=raw_id, idempotency_key=idempotency_key or None,
                   error_contains=error_contains or None, custom=tuple((k, v) for k, v in custom))


@dataclass(slots=True)
class SearchSpec:
    """What a search box text asks for (``parse_search``); empty strings = not given."""

    queue: str = ""
    state: int | None = None
    job_type: str = ""
    job_id: str = ""
    idempotency_key: str = ""
    error_contains: str = ""
    custom: list[tuple[str, str]] = field(default_factory=list)

    def query(self, max_key_bytes: int) -> JobQuery:
        """The checked ``JobQuery`` (``with_search``). Raises ``InvalidRequest``."""
        base = JobQuery(queue=self.queue or None, state=self.state, job_type=self.job_type or None)
        return with_search(base, job_id=self.job_id, idempotency_key=self.idempotency_key,
                           error_contains=self.error_contains, custom=self.custom, max_key_bytes=max_key_bytes)

    @property
    def only_id(self) -> bool:
        """A search for one job id and nothing else (the UI goes straight to its page)."""
        return bool(self.job_id) and not (self.queue or self.state is not None or self.job_type
                                          or self.idempotency_key or self.error_contains or self.custom)


class _Scanner:
    """Reads a search text term by term (see ``parse_search``)."""

    def __init__(self, text: str) -> None:
        self.text, self.i = text, 0

    def skip_spaces(self) -> None:
        while self.i < len(self.text) and self.text[self.i].isspace():
            self.i += 1

    def at_end(self) -> bool:
        return self.i >= len(self.text)

    def peek(self) -> str:
        return self.text[self.i] if self.i < len(self.text) else ""

    def word(self, stops: str) -> str:
        """Characters up to a space, a quote or one of ``stops``."""
        start = self.i
        while self.i < len(self.text) and not self.text[self.i].isspace() and self.text[self.i] not in stops + '"':
            self.i += 1
        return self.text[start:self.i]

    def value(self, term: str) -> str:
        """A quoted string or the characters up to the next space."""
        if self.peek() != '"':
            return self.word("")
        self.i += 1
        out: list[str] = []
        while self.i < len(self.text):
            c = self.text[self.i]
            if c == "\\" and self.i + 1 < len(self.text):
                out.append(self.text[self.i + 1])
                self.i += 2
                continue
            self.i += 1
            if c == '"':
                return "".join(out)
            out.append(c)
        raise InvalidRequest(f"search term {quote(term)}: the quote is not closed", "q")


def parse_search(text: str) -> SearchSpec:
    """The search box's text as a ``SearchSpec`` (syntax: module docstring). Raises
    ``InvalidRequest`` (field ``q``) for text it cannot read."""
    if len(text) > MAX_SEARCH_CHARS:
        raise InvalidRequest(f"a search is at most {MAX_SEARCH_CHARS} characters", "q", MAX_SEARCH_CHARS, len(text))
    spec = SearchSpec()
    seen: set[str] = set()
    s = _Scanner(text)
    while True:
        s.skip_spaces()
        if s.at_end():
            return spec
        start = s.i
        if s.text.startswith("custom.", s.i):
            s.i += len("custom.")
            key = s.value("custom.") if s.peek() == '"' else s.word("=")
            s.skip_spaces()
            if s.peek() != "=":
                raise InvalidRequest(f"search term {quote(s.text[start:s.i].strip())} needs = VALUE "
                                     "(custom.KEY=VALUE)", "q")
            s.i += 1
            s.skip_spaces()
            if s.at_end():
                raise InvalidRequest(f"search term {quote(s.text[start:].strip())} needs a value", "q")
            spec.custom.append((key, s.value(s.text[start:s.i])))
            continue
        word = s.word(":")
        if s.peek() != ":":
            if word and _UUID.match(word) and "job_id" not in seen:
                seen.add("job_id")
                spec.job_id = word
                continue
            shown = word or s.text[start:start + 20]
            raise InvalidRequest(f"unknown search term {quote(shown)}: {_HELP}", "q")
        s.i += 1
        name = FIELDS.get(word.lower())
        if name is None:
            raise InvalidRequest(f"unknown search field {quote(word)}: {_HELP}", "q")
        if name in seen:
            raise InvalidRequest(f"search field {quote(word)} is given twice", "q")
        seen.add(name)
        value = s.value(word + ":")
        if not value:
            raise InvalidRequest(f"search field {quote(word)} needs a value ({word}:VALUE)", "q")
        if name == "state":
            try:
                spec.state = parse_state(value)
            except ValueError as exc:
                raise InvalidRequest(str(exc), "q") from None
        else:
            setattr(spec, name, value)
