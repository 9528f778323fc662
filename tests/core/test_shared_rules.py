"""The rules every front end shares live once in bridge_core: attachment serving, the
attachment JSON form, the bearer parser and secret comparison, the token bucket, the strict
converter and seq-block reservation. Pure parts are tested directly; the download rule over
real sockets on all three front ends."""

from __future__ import annotations

import aiohttp
import attrs
import pytest

from bridge_core.model import events as ev
from bridge_core.kit.downloads import ATTACHMENT_CSP, content_disposition, download_headers
from bridge_core.model.errors import BadRequest
from bridge_core.model.ratelimit import TokenBucket
from bridge_core.model.redact import redact_tool_args
from bridge_core.kit.security import parse_bearer, same_secret
from bridge_core.model.seqalloc import SeqReservation
from bridge_core.model.wire import attachment_fields, strict_converter, structure
from tests.conftest import LVMH_TOKEN, PHEBY_SECRET
from tests.loomi.helpers import pair


def _att(**kw) -> ev.Attachment:
    base = dict(attachment_id="a" * 32, filename="demo.txt", mime_type="text/plain", size=3, kind="document",
                inline_image=False, conversation_id="c1", message_id="m1", created_at=10.0, expires_at=20.0)
    base.update(kw)
    return ev.Attachment(**base)


# --- attachments ------------------------------------------------------------------------------------


def test_content_disposition_cannot_break_the_header():
    value = content_disposition('a"b\\c;d\r\ne\u00e9.txt', inline=False)
    assert value == ("attachment; filename=\"a_b_c_d__e_.txt\"; "
                     "filename*=UTF-8''a%22b%5Cc%3Bd%0D%0Ae%C3%A9.txt")
    assert content_disposition("", inline=True) == "inline; filename=\"file\"; filename*=UTF-8''"


def test_download_headers_are_the_hardened_set():
    h = download_headers(_att(mime_type="image/png", inline_image=True, filename="x.png"))
    assert h == {
        "Content-Type": "image/png",
        "Content-Disposition": "inline; filename=\"x.png\"; filename*=UTF-8''x.png",
        "X-Content-Type-Options": "nosniff",
        "Cache-Control": "private, no-store",
        "Content-Security-Policy": ATTACHMENT_CSP,
    }


def test_attachment_fields_key_order_and_stamps():
    a = _att()
    assert list(attachment_fields(a)) == ["attachment_id", "filename", "mime_type", "size", "kind", "inline_image",
                                          "conversation_id", "message_id", "created_at", "expires_at", "download_path"]
    loomi = attachment_fields(a, with_conversation=False, path_key="url")
    assert "conversation_id" not in loomi and loomi["url"] == a.download_path and loomi["created_at"] == 10.0
    assert attachment_fields(a, stamp=lambda t: None if t is None else f"t{t}")["expires_at"] == "t20.0"


def test_tool_arguments_leave_an_agent_redacted_by_one_rule():
    """Every agent source (the managed runs' RunContext, Hermes's hooks, pi's plugin sessions) and lvmh's
    stored pi frames pass a tool's arguments through ``redact_tool_args``: secret-looking keys at any depth,
    and a value that is not arguments (none, a bare string) becomes ``{}``."""
    args = {"command": "ls", "env": {"API_KEY": "k", "list": [{"password": "p", "user": "me"}]}}
    assert redact_tool_args(args) == {"command": "ls", "env": {"API_KEY": "<redacted>",
                                                               "list": [{"password": "<redacted>", "user": "me"}]}}
    assert args["env"]["API_KEY"] == "k"  # a copy: the agent's own arguments are untouched
    assert redact_tool_args([{"token": "t"}]) == [{"token": "<redacted>"}]
    assert redact_tool_args(None) == {} and redact_tool_args("rm -rf /") == {}


# --- credentials -------------------------------------------------------------------------------------


@pytest.mark.parametrize("header,schemes,expected", [
    (None, ("bearer",), None),
    ("", ("bearer",), None),
    ("Bearer abc", ("bearer",), "abc"),
    ("  bearer   abc  ", ("bearer",), "abc"),
    ("Bearer ", ("bearer",), None),
    ("Basic abc", ("bearer",), None),
    ("ApiKey k", ("bearer", "apikey"), "k"),
    ("Bearer dev:cred", ("bearer",), "dev:cred"),
])
def test_parse_bearer(header, schemes, expected):
    assert parse_bearer(header, schemes) == expected


def test_same_secret_is_exact_and_never_raises():
    assert same_secret("s3cret", "s3cret")
    assert not same_secret("s3cret", "s3creT")
    assert not same_secret("", "") and not same_secret("x", "")
    assert not same_secret("\ud800", "x")  # a lone surrogate compares, it does not raise
    assert same_secret("\udcff", "\udcff")  # a header's undecodable byte, as aiohttp decodes it


# --- token bucket -------------------------------------------------------------------------------------


def test_token_bucket_bursts_then_refills_at_its_rate():
    b = TokenBucket(rate=2.0, burst=3.0, now=0.0)
    assert [b.take(0.0) for _ in range(4)] == [True, True, True, False]
    assert b.take(0.5) and not b.take(0.5)  # one token back after 1/rate s
    assert [b.take(100.0) for _ in range(4)] == [True, True, True, False]  # never above the burst


def test_token_bucket_without_a_start_time_starts_at_its_first_take():
    b = TokenBucket(rate=1.0, burst=1.0)
    assert b.take(1000.0) and not b.take(1000.0)


# --- strict converter ----------------------------------------------------------------------------------


@attrs.frozen
class _W:
    s: str
    i: int = 0
    f: float = 0.0
    b: bool = False


@pytest.mark.parametrize("data", [{"s": 1}, {"s": "x", "i": True}, {"s": "x", "i": 1.5}, {"s": "x", "f": True},
                                  {"s": "x", "b": 1}, {}])
def test_strict_converter_refuses_coercions(data):
    with pytest.raises(BadRequest):
        structure(strict_converter(), data, _W)


def test_strict_converter_takes_exact_types():
    assert structure(strict_converter(), {"s": "x", "i": 2, "f": 3, "b": True}, _W) == _W("x", 2, 3.0, True)


# --- seq reservation -------------------------------------------------------------------------------------


def test_seq_reservation_records_a_block_ahead_half_a_block_early():
    r = SeqReservation(100, reserved=100)
    assert [r.need(s) for s in (1, 50)] == [None, None]
    assert r.need(51) == 151 and r.limit == 101
    assert r.need(101) is None and r.need(102) == 202
    assert r.restart(7) == 107 and r.reserved == 107


def test_seq_reservation_with_no_margin_records_once_passed():
    r = SeqReservation(1000, reserved=5, margin=0)
    assert r.need(5) is None and r.need(6) == 1006


def test_handed_out_seqs_never_pass_what_is_recorded():
    r = SeqReservation(64, reserved=0)
    recorded = 0
    for seq in range(1, 5000):
        upto = r.need(seq)
        if upto is not None:
            assert upto > recorded
            recorded = upto
        assert seq <= recorded


def test_a_watched_seq_brings_the_caller_back_before_the_margin_and_unwatch_restores_it():
    r = SeqReservation(100, reserved=100)
    before = r.reserved
    assert r.need(51) == 151  # recorded ahead, not durable yet: the caller watches the block before it
    r.watch(before)
    assert r.limit == 100 and r.need(100) is None
    r.unwatch()
    assert r.limit == 101 and r.need(101) is None  # unwatched: back at the margin, nothing new to record
    r.watch(500)
    assert r.limit == 101  # a watch never moves the limit up


# --- one download rule over the three front ends -------------------------------------------------------


async def test_every_front_end_serves_an_attachment_with_the_same_headers(service_factory):
    svc = await service_factory()
    bridge = svc.bridge
    conv = bridge.create_conversation("x")
    att = await bridge.attachments.add_bytes(b"<script>1</script>", filename='r\u00e9port"\r\n;.html',
                                             conversation_id=conv.conversation_id, message_id=None,
                                             mime_type="text/html")
    c, creds = await pair(svc)
    await c.close()
    gets = [
        (f"http://127.0.0.1:{svc.ports['pheby']}/attachments/{att.attachment_id}", {"X-Pheby-Secret": PHEBY_SECRET}),
        (f"http://127.0.0.1:{svc.ports['loomi']}/attachments/{att.attachment_id}",
         {"Authorization": f"Bearer {creds['device_id']}:{creds['credential']}"}),
        (f"http://127.0.0.1:{svc.ports['lvmh']}/api/attachments/{att.attachment_id}",
         {"Authorization": f"Bearer {LVMH_TOKEN}"}),
    ]
    want = {k: v for k, v in download_headers(att).items() if k != "Content-Type"}
    async with aiohttp.ClientSession() as http:
        for url, auth in gets:
            async with http.get(url, headers=auth) as r:
                assert r.status == 200, url
                assert await r.read() == b"<script>1</script>"
                assert r.headers["Content-Type"].startswith("text/html")
                assert {k: r.headers.get(k) for k in want} == want, url
                assert r.headers["Content-Disposition"].startswith('attachment; filename="r_port____.html"')
