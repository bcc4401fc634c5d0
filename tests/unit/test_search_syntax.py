"""The search filters' checks and the UI search box's syntax
(``sepp.server.admin.search``), the custom index's value text (``sepp.storage.search``)
and the CLI's ``--where`` parser: pure code, boundaries at the limit and one past."""

from __future__ import annotations

import pytest

from sepp.api.v1 import common_pb2 as pb
from sepp.cli.flags import FlagValueError, parse_where
from sepp.server.admin.search import SearchSpec, parse_search, with_search
from sepp.server.custom_index import index_entries
from sepp.server.errors import InvalidRequest
from sepp.storage.admin import JobQuery
from sepp.storage.search import MAX_CUSTOM_TERMS, MAX_ERROR_BYTES, MAX_TERM_BYTES, prefilter, value_text

JOB_ID = "0190a5c2-7d1e-7c3a-8f00-0123456789ab"


def test_the_search_box_reads_every_field_and_custom_terms_with_or_without_spaces() -> None:
    spec = parse_search('custom.user_id = 42 custom.tenant=acme type:send_email error:"timed out" '
                        'queue:emails state:Dead-Lettered key:order-7')
    assert spec == SearchSpec(queue="emails", state=5, job_type="send_email", idempotency_key="order-7",
                              error_contains="timed out", custom=[("user_id", "42"), ("tenant", "acme")])
    assert parse_search(JOB_ID).only_id and parse_search(f"id:{JOB_ID}").job_id == JOB_ID
    assert not parse_search(f"{JOB_ID} queue:q").only_id
    assert parse_search('error:"say \\"no\\" \\\\ twice"').error_contains == 'say "no" \\ twice'
    assert parse_search('custom."app:user"=7 custom.a:b=c').custom == [("app:user", "7"), ("a:b", "c")]
    assert parse_search("job_type:x idempotency_key:k").job_type == "x"
    assert parse_search("   ") == SearchSpec()


@pytest.mark.parametrize("text, says", [
    ("nonsense", "unknown search term 'nonsense'"),
    ("colour:red", "unknown search field 'colour'"),
    ("type:a type:b", "given twice"),
    ("type:", "needs a value"),
    ("custom.user_id", "needs = VALUE"),
    ("custom.user_id =", "needs a value"),
    ('error:"unclosed', "quote is not closed"),
    ("state:finished", "unknown job state"),
])
def test_text_the_search_box_cannot_read_is_refused_naming_the_term(text: str, says: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_search(text)
    assert says in str(err.value) and err.value.field == "q"


def test_the_search_box_text_is_bounded() -> None:
    parse_search("type:" + "x" * 4091)
    with pytest.raises(InvalidRequest, match="at most 4096 characters"):
        parse_search("type:" + "x" * 4092)


def test_search_filters_are_checked_at_their_limits_and_one_past() -> None:
    base = JobQuery()
    q = with_search(base, job_id=JOB_ID, idempotency_key="k" * 256, error_contains="e" * MAX_ERROR_BYTES,
                    custom=[("k" * MAX_TERM_BYTES, "v" * MAX_TERM_BYTES)] * MAX_CUSTOM_TERMS)
    assert q.job_id is not None and q.indexed and q.searching and len(q.custom) == MAX_CUSTOM_TERMS
    refusals = [
        (dict(job_id="not-a-uuid"), "job_id", None),
        (dict(idempotency_key="k" * 257), "idempotency_key", 256),
        (dict(error_contains="é" * 129), "error_contains", MAX_ERROR_BYTES),
        (dict(custom=[("k", "v")] * (MAX_CUSTOM_TERMS + 1)), "custom", MAX_CUSTOM_TERMS),
        (dict(custom=[("k" * (MAX_TERM_BYTES + 1), "v")]), "custom.key", MAX_TERM_BYTES),
        (dict(custom=[("k", "v" * (MAX_TERM_BYTES + 1))]), "custom.value", MAX_TERM_BYTES),
        (dict(custom=[("", "v")]), "custom.key", None),
        (dict(custom=[("k", "")]), "custom.value", None),
    ]
    for kwargs, field, limit in refusals:
        with pytest.raises(InvalidRequest) as err:
            with_search(base, **kwargs)  # type: ignore[arg-type]
        assert err.value.field == field and err.value.limit == limit, kwargs
    assert not with_search(base).searching


def test_custom_values_are_indexed_as_text_and_long_entries_are_left_out() -> None:
    assert [value_text(v) for v in ("42", 42, -7, True, False, 1.5, 42.0, 1e100)] == \
        ["42", "42", "-7", "true", "false", "1.5", "42.0", "1e+100"]
    req = pb.EnqueueRequest()
    req.custom["user_id"].int_value = 2**63 - 1
    req.custom["vip"].bool_value = True
    req.custom["name"].string_value = "n" * MAX_TERM_BYTES
    req.custom["long"].string_value = "n" * (MAX_TERM_BYTES + 1)
    req.custom["nul"].string_value = "a\x00b"
    entries = index_entries(b"i" * 16, req.custom)
    assert sorted(e[1:] for e in entries) == [("name", "n" * MAX_TERM_BYTES), ("user_id", str(2**63 - 1)),
                                             ("vip", "true")]


def test_the_error_prefilter_keeps_only_what_no_json_writer_escapes() -> None:
    assert prefilter('Say "No" now') == "say "  # the first of the longest runs
    assert prefilter("Zürich DNS failure") == "rich dns failure"
    assert prefilter("ü") == ""


def test_where_flags_are_key_value_pairs_split_at_the_first_equals() -> None:
    assert parse_where(["user_id=42", "expr=a=b", "custom.x=1"]) == [("user_id", "42"), ("expr", "a=b"),
                                                                    ("custom.x", "1")]
    for bad, says in (("user_id", "expected KEY=VALUE"), ("=42", "key before = is empty"),
                      ("user_id=", "value after = is empty")):
        with pytest.raises(FlagValueError, match=says):
            parse_where([bad])
