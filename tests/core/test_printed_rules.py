"""The rule for printing a store or bus URL (pure): ``mask_url`` (bridge_core/config.py) masks every
password form. Its uses are tested over real processes in tests/security/test_printed_strings.py."""

from __future__ import annotations

import pytest

from bridge_core.config import mask_url


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

