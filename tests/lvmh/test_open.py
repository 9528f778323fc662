"""``agent-bridge lvmh open``: a login link to the web UI, the token in the URL fragment."""

from __future__ import annotations

import os
import urllib.parse

import aiohttp

from cli.main import main
from tests.conftest import LVMH_TOKEN


def _link(out: str) -> str:
    return next(line.strip() for line in out.splitlines() if "#token=" in line)


async def test_open_prints_a_login_link_to_the_running_server(service_factory, tmp_path, monkeypatch, capsys):
    svc = await service_factory(adapters=("lvmh",))
    monkeypatch.setenv("LVMH_TOKEN", LVMH_TOKEN)
    assert main(["lvmh", "open", "--data-dir", svc.cfg.data_dir]) == 0
    captured = capsys.readouterr()
    link = _link(captured.out)
    parts = urllib.parse.urlsplit(link)
    assert f"{parts.scheme}://{parts.netloc}" == f"http://127.0.0.1:{svc.ports['lvmh']}"
    assert parts.path == "/" and parts.query == ""
    assert urllib.parse.unquote(parts.fragment) == f"token={LVMH_TOKEN}"
    assert "warning" not in captured.err
    # what a browser requests for that link is the page alone (the fragment stays in the browser), and it is served
    async with aiohttp.ClientSession() as http:
        async with http.get(link) as resp:
            assert resp.status == 200
            assert resp.url.path == "/" and not resp.url.query
            assert "app.js" in await resp.text()


def test_open_reads_the_stored_token(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("LVMH_TOKEN", raising=False)
    os.makedirs(tmp_path / "secrets")
    (tmp_path / "secrets" / "lvmh_token").write_text("stored-token/with+odd=chars\n")
    os.makedirs(tmp_path / "run")  # a server that takes no lock, as it wrote its ports (bridge_core/kit/running.py)
    (tmp_path / "run" / "ports.json").write_text('{"lvmh": 8686}')
    assert main(["lvmh", "open", "--data-dir", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    link = _link(captured.out)
    assert link.startswith("http://127.0.0.1:8686/#token=")
    assert urllib.parse.unquote(link.split("#token=", 1)[1]) == "stored-token/with+odd=chars"
    assert captured.err == ""  # not running: tests/cli/test_command_line.py


def test_open_without_a_token_says_what_to_do(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("LVMH_TOKEN", raising=False)
    assert main(["lvmh", "open", "--data-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "agent-bridge serve" in err
    assert not (tmp_path / "secrets" / "lvmh_token").exists()  # never generates one behind serve's back
