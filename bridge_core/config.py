"""Configuration: the options, environment variables and TOML file of README.md ("Running it").

Precedence: command-line flags, then environment variables, then the TOML
file (``--config`` or ``<data-dir>/config.toml``), then defaults. Missing
secrets are generated and stored in the data directory with owner-only
permissions; only their path is ever printed.
"""

from __future__ import annotations

import os
import secrets
import tomllib
from typing import Any, Optional

import attrs

from .errors import BridgeError
from .security import DEFAULT_UNAUTH_PER_ADDRESS, DEFAULT_WRONG_RATE, is_loopback, weak_secret_reason  # noqa: F401

DEFAULT_PORTS = {"pheby": 8620, "loomi": 8621, "lvmh": 8686}
ALL_ADAPTERS = ("pheby", "loomi", "lvmh")


class ConfigError(BridgeError):
    code = "config_error"
    default_message = "Bad configuration"
    fatal = True


@attrs.define
class Config:
    data_dir: str
    agent: str = "demo"
    adapters: tuple[str, ...] = ALL_ADAPTERS
    host: str = "127.0.0.1"
    ports: dict = attrs.field(factory=lambda: dict(DEFAULT_PORTS))
    tls_cert: Optional[str] = None
    tls_key: Optional[str] = None
    pheby_secret: str = attrs.field(default="", repr=False)
    lvmh_token: str = attrs.field(default="", repr=False)
    loomi_allow_insecure_bind: bool = False
    loomi_public_url: Optional[str] = None
    loomi_pair_ttl: float = 300.0
    retention_days: float = 7.0
    approval_timeout: float = 300.0
    gitlab_url: str = "https://gitlab.com"
    docker_url: Optional[str] = None  # unix:///var/run/docker.sock or http://host:port
    log_level: str = "INFO"
    wrong_auth_rate: float = DEFAULT_WRONG_RATE  # [security] wrong_attempts_per_second
    unauth_per_address: int = DEFAULT_UNAUTH_PER_ADDRESS  # [security] unauthenticated_per_address
    admin_key: str = attrs.field(default="", repr=False)  # this run's, set by Service.start
    # several nodes (docs/scale-out.md): the shared store, the bus, this node's name
    store_url: Optional[str] = attrs.field(default=None, repr=False)  # may carry a password
    bus_url: Optional[str] = attrs.field(default=None, repr=False)
    node_id: str = ""
    extra: dict = attrs.field(factory=dict)  # the raw TOML, for adapters' own sections
    secret_paths: dict = attrs.field(factory=dict)  # which secrets were generated, and where

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert and self.tls_key)

    @property
    def run_dir(self) -> str:
        return os.path.join(self.data_dir, "run")

    def section(self, name: str) -> dict:
        val = self.extra.get(name)
        return val if isinstance(val, dict) else {}


def default_data_dir() -> str:
    return os.environ.get("AGENT_BRIDGE_DATA") or os.path.join(os.path.expanduser("~"), ".agent-bridge")


def _truthy(value: Any) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def read_toml(path: str) -> dict:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}")
    except PermissionError:
        raise ConfigError(f"config file not readable: {path}")
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}")
    except OSError as exc:
        raise ConfigError(f"config file {path} unreadable: {exc.strerror}")


def load_secret(data_dir: str, name: str, env: Optional[str]) -> tuple[str, Optional[str]]:
    """The secret from the environment, or from ``<data-dir>/secrets/<name>``, generated if missing.

    Returns the secret and the path it was stored at (None when it came from the environment).
    """
    if env:
        return env, None
    sdir = os.path.join(data_dir, "secrets")
    os.makedirs(sdir, mode=0o700, exist_ok=True)
    os.chmod(sdir, 0o700)
    path = os.path.join(sdir, name)
    try:
        with open(path, "r", encoding="utf-8") as f:
            value = f.read().strip()
        if value:
            return value, path
    except FileNotFoundError:
        pass
    value = secrets.token_urlsafe(32)
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(value + "\n")
    os.replace(path + ".tmp", path)
    return value, path


NODE_ID_FILE = "node_id"
_NODE_ID_OK = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def check_engines(store_url: Optional[str], bus_url: Optional[str]) -> None:
    """``--store`` / ``--bus`` as the contract allows them (one line of reason otherwise)."""
    if store_url and not store_url.startswith(("postgresql://", "postgres://")):
        raise ConfigError(f"--store must be a postgresql://USER@HOST:PORT/DB URL, not {store_url.split('://')[0]}://...")
    if bus_url:
        if not bus_url.startswith(("redis://", "rediss://")):
            raise ConfigError(f"--bus must be a redis://HOST:PORT/N URL, not {bus_url.split('://')[0]}://...")
        if not store_url:
            raise ConfigError("--bus needs a shared --store (postgresql://...): nodes on a bus share one store")
        raise ConfigError("--bus: the Redis Streams bus between nodes is not in this build yet; "
                          "run one node per store (docs/scale-out.md)")


def load_node_id(data_dir: str, given: Optional[str]) -> str:
    """This node's name: ``given`` (flag, env, TOML), else the one generated once and kept in the data dir."""
    if given:
        name = str(given).strip()
        if not name or len(name) > 64 or not set(name) <= _NODE_ID_OK:
            raise ConfigError("--node-id takes 1 to 64 letters, digits, '-', '_' or '.'")
        return name
    path = os.path.join(data_dir, NODE_ID_FILE)
    try:
        with open(path, "r", encoding="utf-8") as f:
            value = f.read().strip()
        if value:
            return value
    except FileNotFoundError:
        pass
    value = "node-" + secrets.token_hex(4)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(value + "\n")
    os.replace(path + ".tmp", path)
    return value


def build_config(args: dict, environ: Optional[dict] = None, *, with_secrets: bool = True) -> Config:
    """Merge flags (``args``: None means not given), environment and TOML into a Config."""
    env = os.environ if environ is None else environ
    data_dir = os.path.abspath(os.path.expanduser(args.get("data_dir") or env.get("AGENT_BRIDGE_DATA") or default_data_dir()))
    config_path = args.get("config") or env.get("AGENT_BRIDGE_CONFIG")
    toml: dict = {}
    if config_path:
        toml = read_toml(config_path)
    elif os.path.exists(os.path.join(data_dir, "config.toml")):
        toml = read_toml(os.path.join(data_dir, "config.toml"))

    def pick(flag: str, *keys: str, default: Any = None) -> Any:
        if args.get(flag) is not None:
            return args[flag]
        node: Any = toml
        for k in keys:
            if not isinstance(node, dict) or k not in node:
                return default
            node = node[k]
        return node

    adapters_raw = pick("adapters", "adapters", default=",".join(ALL_ADAPTERS))
    if isinstance(adapters_raw, str):
        adapters = tuple(a.strip() for a in adapters_raw.split(",") if a.strip())
    else:
        adapters = tuple(adapters_raw)
    for a in adapters:
        if a not in ALL_ADAPTERS:
            raise ConfigError(f"unknown adapter {a!r}; choose from {', '.join(ALL_ADAPTERS)}")
    if not adapters:
        raise ConfigError("no adapters selected")

    ports = {}
    for name in ALL_ADAPTERS:
        val = pick(f"{name}_port", name, "port", default=DEFAULT_PORTS[name])
        try:
            port = int(val)
        except (TypeError, ValueError):
            raise ConfigError(f"{name} port must be a number, not {val!r}")
        if not 0 <= port <= 65535:
            raise ConfigError(f"{name} port {port} out of range")
        ports[name] = port

    def num(flag: str, keys: tuple, default: float) -> float:
        val = pick(flag, *keys, default=default)
        try:
            return float(val)
        except (TypeError, ValueError):
            raise ConfigError(f"{'.'.join(keys)} must be a number, not {val!r}")

    wrong_rate = num("wrong_auth_rate", ("security", "wrong_attempts_per_second"), DEFAULT_WRONG_RATE)
    if not wrong_rate > 0:
        raise ConfigError("security.wrong_attempts_per_second must be a positive number")
    unauth_cap = num("unauth_per_address", ("security", "unauthenticated_per_address"), DEFAULT_UNAUTH_PER_ADDRESS)
    if unauth_cap < 1 or unauth_cap != int(unauth_cap):
        raise ConfigError("security.unauthenticated_per_address must be a whole number of at least 1")

    cfg = Config(
        data_dir=data_dir,
        agent=str(pick("agent", "agent", default="demo")),
        adapters=adapters,
        host=str(pick("host", "host", default="127.0.0.1")),
        ports=ports,
        tls_cert=pick("tls_cert", "tls", "cert"),
        tls_key=pick("tls_key", "tls", "key"),
        loomi_allow_insecure_bind=_truthy(
            env.get("LOOMI_ALLOW_INSECURE_BIND", pick("loomi_allow_insecure_bind", "loomi", "allow_insecure_bind", default=False))
        ),
        loomi_public_url=pick("loomi_public_url", "loomi", "public_url"),
        loomi_pair_ttl=num("loomi_pair_ttl", ("loomi", "pair_ttl"), 300.0),
        retention_days=num("retention_days", ("attachments", "retention_days"), 7.0),
        approval_timeout=num("approval_timeout", ("demo", "approval_timeout"), 300.0),
        gitlab_url=str(env.get("LVMH_GITLAB_URL") or pick("gitlab_url", "lvmh", "gitlab_url", default="https://gitlab.com")),
        docker_url=env.get("LVMH_DOCKER_URL") or pick("docker_url", "lvmh", "docker_url"),
        log_level=str(pick("log_level", "log_level", default="INFO")),
        wrong_auth_rate=wrong_rate,
        unauth_per_address=int(unauth_cap),
        extra=toml,
        store_url=args.get("store") or env.get("AGENT_BRIDGE_STORE") or pick("store", "store", "url"),
        bus_url=args.get("bus") or env.get("AGENT_BRIDGE_BUS") or pick("bus", "bus", "url"),
    )
    check_engines(cfg.store_url, cfg.bus_url)
    if bool(cfg.tls_cert) != bool(cfg.tls_key):
        raise ConfigError("--tls-cert and --tls-key go together")
    for path in (cfg.tls_cert, cfg.tls_key):
        if path and not os.access(path, os.R_OK):
            raise ConfigError(f"TLS file not readable: {path}")
    if with_secrets:
        for var in ("PHEBY_SECRET", "LVMH_TOKEN"):
            reason = weak_secret_reason(var, env.get(var))
            if reason:
                raise ConfigError(reason)
        try:
            os.makedirs(data_dir, mode=0o700, exist_ok=True)
            cfg.pheby_secret, p1 = load_secret(data_dir, "pheby_secret", env.get("PHEBY_SECRET"))
            cfg.lvmh_token, p2 = load_secret(data_dir, "lvmh_token", env.get("LVMH_TOKEN"))
        except OSError as exc:
            raise ConfigError(f"cannot use the data directory {data_dir}: {exc.strerror or exc}")
        cfg.secret_paths = {k: v for k, v in (("pheby_secret", p1), ("lvmh_token", p2)) if v}
        try:
            cfg.node_id = load_node_id(
                data_dir, args.get("node_id") or env.get("AGENT_BRIDGE_NODE_ID") or pick("node_id", "node", "id")
            )
        except OSError as exc:
            raise ConfigError(f"cannot keep the node id in {data_dir}: {exc.strerror or exc}")
    return cfg
