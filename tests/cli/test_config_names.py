"""A config file naming a section or key no parser reads is refused with the nearest valid name
(never ignored), by every command that reads it; and a parser cannot read a key the schema lacks."""

from __future__ import annotations

import pytest

from bridge_core.kit.config import Config
from cli.config import build_config
from bridge_core.model.errors import ConfigError
from tests.cli.clirun import FREE_PORTS, one_line, run

REFUSED = [
    ("[phebby]\nport = 8620\n", "unknown section [phebby] in {path}; did you mean [pheby]?"),
    ("[pheby]\nprot = 8620\n", "unknown key pheby.prot in {path}; did you mean pheby.port?"),
    ("adaptors = \"lvmh\"\n", "unknown key adaptors in {path}; did you mean adapters?"),
    ("[loomi]\nping_intervall = 5\n", "unknown key loomi.ping_intervall in {path}; did you mean loomi.ping_interval?"),
    ("[push]\ngrace = 5\n", "unknown key push.grace in {path}; did you mean push.grace_seconds?"),
    ("pheby = 8620\n", "pheby in {path} is a section: write it as [pheby] with its keys below"),
    ("[pheby.extra]\nx = 1\n", "unknown key pheby.extra in {path}; "),
]


@pytest.mark.parametrize("text,expected", REFUSED)
def test_unknown_names_refused_with_the_nearest(tmp_path, text, expected):
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        build_config({"data_dir": str(tmp_path / "d"), "config": str(path)}, {}, with_secrets=False)
    assert info.value.message.startswith(expected.format(path=path))


def test_every_command_refuses_a_misspelt_section(tmp_path):
    home, data = tmp_path / "home", tmp_path / "data"
    data.mkdir()
    (data / "config.toml").write_text("[phebby]\nport = 9000\n")  # the data dir's own config, found by itself
    line = f"agent-bridge: unknown section [phebby] in {data / 'config.toml'}; did you mean [pheby]?"
    proc = run(home, "serve", "--data-dir", str(data), *FREE_PORTS)
    assert proc.returncode == 2 and one_line(proc.stderr) == line
    assert not (data / "run").exists() and not (data / "secrets").exists()  # refused before it started anything
    for args in (["lvmh", "open"], ["pheby", "connect", "--json"], ["loomi", "pair"], ["doctor"]):
        proc = run(home, *args, "--data-dir", str(data))
        assert proc.returncode in (1, 2) and one_line(proc.stderr) == line, args


def test_every_documented_section_is_accepted(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(
        'adapters = "pheby,loomi,lvmh"\nhost = "127.0.0.1"\nagent = "demo"\nlog_level = "INFO"\n'
        'trusted_proxy = ["127.0.0.1/32"]\n'
        "[pheby]\nport = 8620\nhello_timeout = 10\ndraft_interval_ms = 40\n"
        "[loomi]\nport = 8621\nping_interval = 25\npair_ttl = 300\n"
        "[lvmh]\nport = 8686\nplugin_return_seconds = 60\nworker_quota_mb = 64\nclone_timeout = 900\n"
        "[tls]\nwatch_interval = 2\n[attachments]\nretention_days = 7\n[demo]\napproval_timeout = 300\n"
        "[security]\nwrong_attempts_per_second = 20\n[push]\ngrace_seconds = 5\n[node]\nid = \"n1\"\n"
        "[metrics]\nport = 8699\n[public_url]\nloomi = \"wss://loomi.example.com/ws\"\n")
    cfg = build_config({"data_dir": str(tmp_path / "d"), "config": str(path)}, {}, with_secrets=False)
    assert cfg.ports == {"pheby": 8620, "loomi": 8621, "lvmh": 8686}
    assert cfg.section("pheby").get("hello_timeout") == 10 and cfg.public_urls["loomi"] == "wss://loomi.example.com/ws"


def test_a_parser_cannot_read_an_undeclared_key(tmp_path):
    """The other half of one schema: a key read anywhere is a key the file check accepts."""
    from cli.config import SCHEMA
    from bridge_core.model.config_schema import UndeclaredKey

    cfg = Config(data_dir=str(tmp_path), extra={"pheby": {"port": 1, "prot": 2}}, schema=SCHEMA)
    assert cfg.section("pheby").get("port") == 1 and cfg.section("pheby")["port"] == 1
    with pytest.raises(UndeclaredKey):
        cfg.section("pheby").get("prot")  # even set in the file: nobody declared it
    with pytest.raises(UndeclaredKey):
        cfg.section("phebby")
    assert set(SCHEMA["metrics"]) == {"port", "host", "token"}  # [metrics] (the metrics endpoint) is known


def test_each_front_end_declares_its_own_section_and_the_core_none(tmp_path):
    """The core's schema names no front end: each front end's part (its config.py) brings its section,
    its port and its settings, and the host assembles them (cli/config.py)."""
    from bridge_core.kit import config as core
    from cli.config import PARTS
    from loomi_adapter.config import PART as LOOMI

    names = [p.name for p in PARTS]
    assert names == ["pheby", "loomi", "lvmh"] and not set(names) & set(core.CORE_SCHEMA)
    path = tmp_path / "config.toml"
    path.write_text("[loomi]\nport = 9\npair_ttl = 60\n")
    flags = {"data_dir": str(tmp_path / "d"), "config": str(path)}
    with pytest.raises(ConfigError, match=r"unknown section \[loomi\]"):
        core.build_config(flags, {}, with_secrets=False)  # the core alone
    cfg = core.build_config(flags, {}, parts=[LOOMI], with_secrets=False)
    assert cfg.adapters == ("loomi",) and cfg.ports == {"loomi": 9} and cfg.frontend("loomi").pair_ttl == 60.0
