"""The two rules for what is printed (pure): ``mask_url`` (bridge_core/model/redact.py) masks every password
form of a store or bus URL, ``printable`` (bridge_core/model/terminal.py) strips what a terminal obeys.
Their uses are tested over real processes in tests/security/test_printed_strings.py."""

from __future__ import annotations

import logging

import pytest

from bridge_core.model.redact import mask_url
from bridge_core.model.terminal import PrintableFormatter, printable


@pytest.mark.parametrize("url, shown", [
    ("postgresql://bridge:hunter2@db:5432/bridge", "postgresql://bridge:***@db:5432/bridge"),
    ("postgres://:hunter2@db/bridge", "postgres://:***@db/bridge"),
    ("redis://:hunter2@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
    ("rediss://default:hun@ter2@cache:6380/1", "rediss://default:***@cache:6380/1"),  # to the last "@"
    ("redis://me@example.com:hunter2@cache/0", "redis://me@example.com:***@cache/0"),
    ("postgresql://bridge@db/bridge?password=hunter2", "postgresql://bridge@db/bridge?password=***"),
    ("postgresql://db/bridge?sslmode=require&password=hunter2&user=b",
     "postgresql://db/bridge?sslmode=require&password=***&user=b"),
    ("postgresql://db/bridge?sslpassword=hunter2", "postgresql://db/bridge?sslpassword=***"),
    ("postgresql://db/bridge?PASSWORD=hunter2", "postgresql://db/bridge?PASSWORD=***"),
    ("host=db user=bridge password=hunter2 dbname=bridge", "host=db user=bridge password=*** dbname=bridge"),
    ("host=db password = 'hun ter\\'2' dbname=bridge", "host=db password = *** dbname=bridge"),
    ('invalid dsn: password="hunter2" ...', "invalid dsn: password=*** ..."),
    ("cannot reach the store postgresql://b:hunter2@db:1/x: refused", "cannot reach the store postgresql://b:***@db:1/x: refused"),
])
def test_every_password_form_is_masked(url, shown):
    assert mask_url(url) == shown
    assert "hunter2" not in mask_url(url) and "ter2" not in mask_url(url)


@pytest.mark.parametrize("url", ["postgresql://bridge@db:5432/bridge", "redis://cache:6379/0", "SQLite",
                                 "postgresql://bridge@db:5432/bridge?application_name=a@b&sslmode=require"])
def test_a_url_without_a_password_is_unchanged(url):
    assert mask_url(url) == url


def test_printable_strips_what_a_terminal_obeys_and_nothing_else():
    assert printable("Pixel\x1b[2K\r\x1b]0;owned\x07 \u009b31m\u009d8;;x\u202eevil\x00\x7f") == "Pixel[2K ]0;owned 31m8;;xevil"
    assert printable("two\nlines\tand\u2028more") == "two lines and more"
    for normal in ("Émile’s phone 日本", "Pixel 8 Pro (2)", "naïve – “quoted” 🙂", ""):
        assert printable(normal) == normal
    assert printable(42) == "42"


def test_the_log_formatter_keeps_a_line_one_line_and_a_traceback_readable():
    fmt = PrintableFormatter("%(levelname)s %(message)s")
    record = logging.LogRecord("t", logging.INFO, __file__, 1, "refused %s", ("/x\x1b[2K\nFAKE",), None)
    assert fmt.format(record) == "INFO refused /x[2K FAKE"
    try:
        raise ValueError("bad\x1b]0;t\x07")
    except ValueError:
        import sys

        record = logging.LogRecord("t", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    out = fmt.format(record)
    assert out.startswith("ERROR failed\nTraceback") and "\x1b" not in out and "\x07" not in out
    assert "ValueError: bad]0;t" in out
