"""The command line a newcomer meets, run as they run it (``tests/cli/clirun.py``: ``python -m cli ...``
in a process of its own, ``HOME`` a fresh directory): its output and exit status asserted."""

from __future__ import annotations

import json
import signal
import stat
import threading
import urllib.parse

from tests.cli.clirun import FREE_PORTS, Serve, one_line, run
from tests.waiting import until_sync


def _link(out: str) -> str:
    return next(line.strip() for line in out.splitlines() if "#token=" in line)


# --- serve's banner: a newcomer's terminal says how it ends ------------------------------------------------


def test_the_banner_ends_saying_how_to_stop(tmp_path):
    # README's first five minutes: the banner's last line tells how to stop it, and Ctrl-C (SIGINT) does,
    # saying so; the line comes after the secrets' paths, so it is the last thing the terminal shows
    srv = Serve(tmp_path / "home", tmp_path / "data", "serve", "--data-dir", str(tmp_path / "data"), *FREE_PORTS)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(srv.proc.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        until_sync(lambda: "  Ctrl-C stops it\n" in lines, 30, what="the banner's stop line")
    finally:
        srv.proc.send_signal(signal.SIGINT)
        err = srv.proc.stderr.read()
        reader.join(30)
        rc = srv.proc.wait(30)
    assert rc == 0, err
    hint = lines.index("  Ctrl-C stops it\n")
    assert lines[hint - 1].endswith("(owner-only)\n") and "lvmh_token stored in" in "".join(lines[:hint])
    assert lines[hint + 1:] == ["agent-bridge: stopped\n"]


# --- global options: before or after the command, never ignored ------------------------------------------


def test_global_options_before_and_after_the_command(tmp_path):
    home, data = tmp_path / "home", tmp_path / "data"
    config = tmp_path / "lvmh-pheby.toml"
    config.write_text('adapters = "lvmh,pheby"\n')
    # both given before `serve`: this data dir and this config (two front ends, not three)
    srv = Serve(home, data, "--data-dir", str(data), "--config", str(config), "serve", *FREE_PORTS)
    try:
        assert set(srv.ports) == {"lvmh", "pheby"}
        assert not (home / ".agent-bridge").exists()  # the default data dir was never used
        token = (data / "secrets" / "lvmh_token").read_text().strip()
        port = srv.ports["lvmh"]
        for args in (["--data-dir", str(data), "lvmh", "open"], ["lvmh", "open", "--data-dir", str(data)],
                     ["lvmh", "--data-dir", str(data), "open"], ["--config", str(config), "lvmh", "open",
                                                                 "--data-dir", str(data)]):
            proc = run(home, *args)
            assert proc.returncode == 0, (args, proc.stderr)
            link = urllib.parse.urlsplit(_link(proc.stdout))
            assert link.netloc == f"127.0.0.1:{port}" and link.fragment == "token=" + urllib.parse.quote(token, safe="")
        for args in (["--data-dir", str(data), "pheby", "connect", "--json"],
                     ["pheby", "connect", "--json", "--data-dir", str(data)]):
            proc = run(home, *args)
            assert proc.returncode == 0, (args, proc.stderr)
            assert json.loads(proc.stdout)["url"] == f"ws://127.0.0.1:{srv.ports['pheby']}/ws"
        # the same option twice with two values: refused, naming both, never one silently dropped
        proc = run(home, "--data-dir", str(data), "lvmh", "open", "--data-dir", str(tmp_path / "other"))
        assert proc.returncode == 2 and "#token=" not in proc.stdout
        assert "--data-dir given twice with different values" in proc.stderr and str(tmp_path / "other") in proc.stderr
        # ... and twice with one value is that value
        proc = run(home, "--data-dir", str(data), "lvmh", "open", "--data-dir", str(data) + "/")
        assert proc.returncode == 0, proc.stderr
    finally:
        rc, out, err = srv.stop()
    assert rc == 0, err
    # the banner names the next commands, with this data dir; a loopback bind is local use, not a warning
    assert f"`agent-bridge pheby connect --data-dir {data}`" in out
    assert f"`agent-bridge lvmh open --data-dir {data}`" in out
    assert "warning" not in out + err and "cannot dial" not in out + err
    assert "note: pheby listens on 127.0.0.1, for this machine only" in out and "docs/remote-access.md" in out


def test_a_config_given_before_serve_is_read(tmp_path):
    """`agent-bridge --config F serve`: a refusal only the file can cause shows it was read."""
    config = tmp_path / "c.toml"
    config.write_text('adapters = "lvmh"\nhost = "0.0.0.0"\n')  # non-loopback, no TLS: refused at start
    proc = run(tmp_path / "home", "--config", str(config), "--data-dir", str(tmp_path / "d"), "serve", *FREE_PORTS)
    assert proc.returncode == 2
    assert one_line(proc.stderr).startswith("agent-bridge: refusing to bind 0.0.0.0 without TLS")


# --- commands that need a running server ------------------------------------------------------------------


def test_commands_that_need_a_server_say_how_to_start_it(tmp_path):
    home, data = tmp_path / "home", tmp_path / "data"
    commands = (["lvmh", "open"], ["pheby", "connect", "--json"], ["loomi", "pair", "--json"])
    expected = (f"agent-bridge: agent-bridge is not running on {data}; "
                f"start it with agent-bridge serve --data-dir {data}")
    for args in commands:  # nothing ever ran there
        proc = run(home, *args, "--data-dir", str(data))
        assert proc.returncode == 1 and proc.stdout == "", (args, proc.stdout)
        assert one_line(proc.stderr) == expected
    default = home / ".agent-bridge"  # the default data dir: the command to type needs no --data-dir
    proc = run(home, "lvmh", "open")
    assert proc.returncode == 1
    assert one_line(proc.stderr) == (f"agent-bridge: agent-bridge is not running on {default}; "
                                     "start it with agent-bridge serve")
    # a server killed with -9 leaves its run/ files: still no server, and no link to its dead port
    srv = Serve(home, data, "serve", "--data-dir", str(data), *FREE_PORTS)
    srv.stop(signal.SIGKILL)
    assert (data / "run" / "ports.json").exists() and (data / "secrets" / "lvmh_token").exists()
    for args in commands:
        proc = run(home, *args, "--data-dir", str(data), PHEBY_SECRET="p" * 20, LVMH_TOKEN="t" * 20)
        assert proc.returncode == 1 and proc.stdout == "", (args, proc.stdout)
        assert one_line(proc.stderr) == expected


def test_a_server_without_that_front_end_is_named(tmp_path):
    home, data = tmp_path / "home", tmp_path / "data"
    srv = Serve(home, data, "serve", "--data-dir", str(data), "--adapters", "loomi", *FREE_PORTS)
    try:
        proc = run(home, "lvmh", "open", "--data-dir", str(data))
        assert proc.returncode == 1 and proc.stdout == ""
        assert one_line(proc.stderr) == (f"agent-bridge: the agent-bridge running on {data} has no lvmh front end: "
                                         f"restart it with agent-bridge serve --data-dir {data} --adapters ...,lvmh")
        proc = run(home, "pheby", "connect", "--json", "--data-dir", str(data))
        assert proc.returncode == 1 and "has no Pheby front end" in one_line(proc.stderr)
    finally:
        srv.stop()


# --- lvmh open --browser --------------------------------------------------------------------------------


def test_open_browser_fails_when_no_browser_starts(tmp_path):
    home, data = tmp_path / "home", tmp_path / "data"
    seen = tmp_path / "opened"
    browser = tmp_path / "browser"  # a browser that records what it was asked to open
    browser.write_text(f"#!/bin/sh\nprintf '%s' \"$1\" > {seen}\n")
    browser.chmod(browser.stat().st_mode | stat.S_IXUSR)
    token = "env-token-" + "k" * 20  # given in serve's environment: no copy in the data dir
    srv = Serve(home, data, "serve", "--data-dir", str(data), "--adapters", "lvmh", *FREE_PORTS, LVMH_TOKEN=token)
    try:
        proc = run(home, "lvmh", "open", "--browser", "--data-dir", str(data), BROWSER="false", LVMH_TOKEN=token)
        assert proc.returncode == 1
        assert _link(proc.stdout).endswith("#token=" + token)  # the link is printed all the same
        assert one_line(proc.stderr) == ("agent-bridge: no browser could be started (set BROWSER to one); "
                                         "open the link above by hand")
        proc = run(home, "lvmh", "open", "--browser", "--data-dir", str(data), BROWSER=str(browser), LVMH_TOKEN=token)
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
        opened = seen.read_text()  # an owner-only file, never the token on a command line
        assert opened.startswith("file://") and token not in opened
        proc = run(home, "lvmh", "open", "--data-dir", str(data))  # this shell lacks the token serve was given
        assert proc.returncode == 1 and token not in proc.stdout + proc.stderr
        assert one_line(proc.stderr) == (f"agent-bridge: no lvmh token stored in {data} (its server was given "
                                         "$LVMH_TOKEN): set LVMH_TOKEN here too")
    finally:
        srv.stop()


# --- serve's failures: one line, one hint ------------------------------------------------------------------


def test_port_in_use_names_the_agent_bridge_that_has_it(tmp_path):
    home = tmp_path / "home"
    default = home / ".agent-bridge"
    first = Serve(home, default, "serve", "--adapters", "pheby", *FREE_PORTS)  # the newcomer's `serve`, elsewhere
    try:
        port = first.ports["pheby"]
        proc = run(home, "serve", "--data-dir", str(tmp_path / "second"), "--adapters", "pheby,lvmh",
                   "--pheby-port", str(port), "--lvmh-port", "0")
        assert proc.returncode == 2
        line = one_line(proc.stderr)
        assert f"cannot listen on 127.0.0.1:{port}" in line
        assert f"agent-bridge is already running on {default} (pid {first.proc.pid})" in line
        assert "--pheby-port 0 picks a free one" in line
    finally:
        assert first.stop()[0] == 0


def test_port_in_use_by_another_program(tmp_path):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        proc = run(tmp_path / "home", "serve", "--data-dir", str(tmp_path / "d"), "--adapters", "loomi",
                   "--loomi-port", str(port))
    assert proc.returncode == 2
    line = one_line(proc.stderr)
    assert f"is another program (or an agent-bridge on another data directory) using port {port}?" in line
    assert "--loomi-port 0 picks a free one" in line and "already running" not in line


def test_agent_choices_are_the_ones_that_run_here(tmp_path):
    home = tmp_path / "home"
    proc = run(home, "serve", "--data-dir", str(tmp_path / "d"), "--agent", "foo", *FREE_PORTS)
    assert proc.returncode == 2
    line = one_line(proc.stderr)
    assert line == "agent-bridge: unknown agent 'foo'; choose demo (the agent `agent-bridge serve` runs)"
    proc = run(home, "serve", "--data-dir", str(tmp_path / "d"), "--agent", "hermes", *FREE_PORTS)
    assert proc.returncode == 2 and "Hermes is not installed here" in one_line(proc.stderr)
    # with Hermes importable, it is named, with where it runs
    fake = tmp_path / "site" / "hermes_cli"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    proc = run(home, "serve", "--data-dir", str(tmp_path / "d"), "--agent", "foo", *FREE_PORTS,
               PYTHONPATH=str(tmp_path / "site"))
    assert proc.returncode == 2
    assert "choose demo" in one_line(proc.stderr) and "`hermes gateway run`" in proc.stderr


def test_an_unknown_log_level_is_refused(tmp_path):
    proc = run(tmp_path / "home", "serve", "--data-dir", str(tmp_path / "d"), "--log-level", "LOUD", *FREE_PORTS)
    assert proc.returncode == 2
    assert one_line(proc.stderr) == "agent-bridge: --log-level must be one of DEBUG, INFO, WARNING, ERROR, not 'LOUD'"


# --- help ---------------------------------------------------------------------------------------------------


def test_help_describes_the_commands(tmp_path):
    top = run(tmp_path, "--help")
    assert top.returncode == 0
    text = " ".join(top.stdout.split())
    assert "lvmh lvmh: log in to the web UI (lvmh open)" in text and "pi extension for mirroring" not in text
    assert "--data-dir and --config go before or after any command" in text
    serve = run(tmp_path, "serve", "--help")
    assert serve.returncode == 0
    text = " ".join(serve.stdout.split())
    assert "Run the bridge" in text and "agent-bridge pheby connect" in text and "agent-bridge loomi pair" in text
    assert "--tls-cert FILE PEM certificate" in text and "--tls-key FILE its PEM private key" in text
    assert "--agent AGENT the agent: demo (the default;" in text and "or hermes" not in text  # not what serve refuses
