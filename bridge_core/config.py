"""Configuration: the options, environment variables and TOML file of docs/usage.md ("Running it", "The config file").

Precedence: command-line flags, then environment variables, then the TOML
file (``--config`` or ``<data-dir>/config.toml``), then defaults. Missing
secrets are generated and stored in the data directory with owner-only
permissions; only their path is ever printed.
"""

from __future__ import annotations

import os
import re
import secrets
import tomllib
from typing import Any, Optional

import attrs

from .config_schema import TOP, Section, declared, unknown_name
from .errors import BridgeError
from .private import private_dir, write_private
from .security import (DEFAULT_UNAUTH_PER_ADDRESS, DEFAULT_WRONG_RATE, MIN_SECRET_LENGTH, is_loopback,  # noqa: F401
                       weak_secret_reason)

DEFAULT_PORTS = {"pheby": 8620, "loomi": 8621, "lvmh": 8686}
ALL_ADAPTERS = ("pheby", "loomi", "lvmh")
DEFAULT_WORKER_QUOTA_MB = 64.0  # [lvmh] worker_quota_mb (docs/security.md, "What a worker may store")
DEFAULT_METRICS_PORT = 8699  # [metrics] port (docs/operations.md)


class ConfigError(BridgeError):
    code = "config_error"
    default_message = "Bad configuration"
    fatal = True


# --- [push] (docs/push.md) -------------------------------------------------------


@attrs.frozen
class PushConfig:
    """``[push]``: when a waiting decision or a finished run reaches a closed client, and through what."""

    grace_seconds: float = 5.0  # a waiting approval/clarification is pushed when unanswered this long
    run_seconds: float = 30.0  # a finished run is pushed when it ran longer and no client saw it end
    web_push: bool = True  # Web Push (browsers, UnifiedPush distributors) on or off
    ntfy_url: str = ""
    ntfy_token: str = attrs.field(default="", repr=False)
    ntfy_full_text: bool = False  # false: only the title and the conversation name reach the ntfy server
    ntfy_actions: bool = True  # approvals carry "Approve once"/"Deny" on ntfy too (docs/push.md: who reads them)
    webhook_url: str = ""
    webhook_secret: str = attrs.field(default="", repr=False)
    queue_size: int = 64  # notifications kept per endpoint while it cannot be reached (oldest dropped)
    retry_seconds: float = 1.0  # the first retry's delay (at least 1); doubled each time, at most retry_max_seconds
    retry_max_seconds: float = 300.0
    ttl_seconds: float = 86400.0  # a notification not delivered by then is dropped
    vapid_subject: str = "mailto:agent-bridge@localhost"
    allow_insecure_endpoints: bool = False  # Web Push to http:// loopback addresses (tests), never by default


PUSH_MIN_SECRET = 16
PUSH_RETRY_FLOOR = 1.0  # s: a failing endpoint is never tried again sooner, whatever it says (Retry-After: 0)


def parse_push(raw: Any) -> PushConfig:
    """The ``[push]`` table (missing: the defaults); ConfigError naming the key on a bad value."""
    if raw is None:
        return PushConfig()
    if not isinstance(raw, dict):
        raise ConfigError("[push] must be a table")
    fields = attrs.fields_dict(PushConfig)
    values: dict[str, Any] = {}
    for key, value in raw.items():
        field = fields.get(key)
        if field is None:
            raise ConfigError(f"unknown key push.{key}; known: {', '.join(fields)}")
        default = field.default
        if isinstance(default, bool):
            if not isinstance(value, bool):
                raise ConfigError(f"push.{key} must be true or false")
        elif isinstance(default, (int, float)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(f"push.{key} must be a non-negative number")
            value = type(default)(value)
        elif not isinstance(value, str):
            raise ConfigError(f"push.{key} must be a string")
        values[key] = value
    cfg = PushConfig(**values)
    for key in ("ntfy_url", "webhook_url"):
        url = getattr(cfg, key)
        if url and not url.startswith(("https://", "http://")):
            raise ConfigError(f"push.{key} must be an http:// or https:// URL")
    if cfg.webhook_url and len(cfg.webhook_secret) < PUSH_MIN_SECRET:
        raise ConfigError(f"push.webhook_url needs push.webhook_secret of at least {PUSH_MIN_SECRET} characters")
    if cfg.queue_size < 1:
        raise ConfigError("push.queue_size must be at least 1")
    if cfg.retry_seconds < PUSH_RETRY_FLOOR:
        raise ConfigError(f"push.retry_seconds must be at least {PUSH_RETRY_FLOOR:g} (a failing endpoint is never "
                          "tried again sooner)")
    if cfg.retry_max_seconds < cfg.retry_seconds:
        raise ConfigError("push.retry_max_seconds must be at least push.retry_seconds")
    return cfg


@attrs.frozen
class MetricsConfig:
    """``[metrics]``, ``--metrics-port``, ``--metrics-host``: the Prometheus endpoint (docs/operations.md)."""

    port: Optional[int] = DEFAULT_METRICS_PORT  # None: off
    host: str = "127.0.0.1"
    token: str = attrs.field(default="", repr=False)  # Bearer; required on a non-loopback host


def parse_metrics(port: Any, host: Any, raw: Any, tls: bool, insecure_ok: bool) -> MetricsConfig:
    """``[metrics]`` under ``port``/``host`` (None: not given); ConfigError for a bad value or an exposed endpoint."""
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise ConfigError("[metrics] must be a table")
    value = raw.get("port", DEFAULT_METRICS_PORT) if port is None else port
    if value is False or str(value).strip().lower() == "off":
        return MetricsConfig(port=None)
    if isinstance(value, bool) or not str(value).strip().isdigit() or not 0 <= int(value) <= 65535:
        raise ConfigError(f"metrics port must be 0-65535 or off, not {value!r}")
    token = raw.get("token", "")
    if not isinstance(token, str) or (token and len(token) < MIN_SECRET_LENGTH):
        raise ConfigError(f"metrics.token must be a string of at least {MIN_SECRET_LENGTH} characters")
    cfg = MetricsConfig(port=int(value), host=str(raw.get("host", "127.0.0.1") if host is None else host), token=token)
    if not is_loopback(cfg.host) and not cfg.token:
        raise ConfigError(f"refusing to serve metrics on {cfg.host} without [metrics] token (Prometheus sends it "
                          "as a Bearer credential); or keep --metrics-host on loopback")
    if not (is_loopback(cfg.host) or tls or insecure_ok):
        raise ConfigError(f"refusing to serve metrics on {cfg.host} without TLS: pass --tls-cert/--tls-key, or set "
                          "LOOMI_ALLOW_INSECURE_BIND=true (docs/operations.md)")
    return cfg
# --- the config file's schema: each section and the keys its parser reads (bridge_core/config_schema.py) -----
# A file naming anything else is refused with the nearest name; a parser reading a key missing here fails.

SCHEMA: dict[str, frozenset] = {k: frozenset(v) for k, v in {
    TOP: ("adapters", "agent", "host", "log_level", "log_format", "public_url", "public_fp", "trusted_proxy"),
    # the front ends: here (port, public_url, ...) and in pheby_adapter/server.py, pacing.py, loomi_adapter/server.py,
    # lvmh_adapter/server.py, spawn.py
    "pheby": ("port", "hello_timeout", "heartbeat", "rate", "burst", "outbox_items", "draft_interval_ms",
              "draft_min_interval_ms", "draft_max_interval_ms", "draft_full_chars"),
    "loomi": ("port", "allow_insecure_bind", "pair_ttl", "public_url", "hello_timeout", "ping_interval",
              "pong_timeout", "max_missed_pongs", "outbox_items", "rate", "burst"),
    "lvmh": ("port", "public_url", "gitlab_url", "docker_url", "worker_quota_mb", "plugin_return_seconds",
             "worker_image", "git_image", "models_json", "models_json_target", "worker_context", "worker_dockerfile",
             "agent_url", "network", "clone_user", "clone_timeout", "build_timeout", "max_active_spawns",
             "job_retention"),
    "tls": ("cert", "key", "watch_interval"),  # watch_interval: cli/app.py
    "attachments": ("retention_days",),
    "demo": ("approval_timeout",),
    "security": ("wrong_attempts_per_second", "unauthenticated_per_address"),
    "push": tuple(attrs.fields_dict(PushConfig)),
    "store": ("url",),
    "bus": ("url", "key"),
    "node": ("id",),
    "metrics": ("port", "host", "token"),
    "public_url": ALL_ADAPTERS,  # also a top-level "NAME=URL,..." string
    "public_fp": ALL_ADAPTERS,
}.items()}
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


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
    loomi_public_url: Optional[str] = None  # = public_urls["loomi"] (the --loomi-public-url alias)
    loomi_pair_ttl: float = 300.0
    retention_days: float = 7.0
    approval_timeout: float = 300.0
    gitlab_url: str = "https://gitlab.com"
    docker_url: Optional[str] = None  # unix:///var/run/docker.sock or http://host:port
    worker_quota_mb: float = DEFAULT_WORKER_QUOTA_MB  # [lvmh]: events a plugin session may store (0: no limit)
    log_level: str = "INFO"
    log_format: str = "text"  # --log-format: text or json (one object per line, docs/operations.md)
    metrics: MetricsConfig = attrs.field(factory=MetricsConfig)  # [metrics]
    wrong_auth_rate: float = DEFAULT_WRONG_RATE  # [security] wrong_attempts_per_second
    unauth_per_address: int = DEFAULT_UNAUTH_PER_ADDRESS  # [security] unauthenticated_per_address
    admin_key: str = attrs.field(default="", repr=False)  # this run's, set by Service.start
    push: PushConfig = attrs.field(factory=PushConfig)  # [push]
    # several nodes (docs/scale-out.md): the shared store, the bus, this node's name
    store_url: Optional[str] = attrs.field(default=None, repr=False)  # may carry a password
    bus_url: Optional[str] = attrs.field(default=None, repr=False)
    bus_key: str = attrs.field(default="", repr=False)  # the cluster key's material when set ("": from the secrets)
    node_id: str = ""
    extra: dict = attrs.field(factory=dict)  # the raw TOML, for adapters' own sections
    secret_paths: dict = attrs.field(factory=dict)  # which secrets were generated, and where
    # --- remote access (docs/remote-access.md) ---
    public_urls: dict = attrs.field(factory=dict)  # front end -> validated public URL (--public-url)
    public_fp: dict = attrs.field(factory=dict)  # front end -> SHA-256 hex the QR carries (--public-fp)
    trusted_proxies: tuple = ()  # ipaddress networks whose forwarded headers name the client (--trusted-proxy)

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert and self.tls_key)

    @property
    def run_dir(self) -> str:
        return os.path.join(self.data_dir, "run")

    def section(self, name: str) -> dict:
        """``[name]`` of the config file (empty when absent); reading a key SCHEMA lacks raises."""
        val = self.extra.get(name)
        return Section(name, val if isinstance(val, dict) else {}, SCHEMA)


def default_data_dir() -> str:
    return os.environ.get("AGENT_BRIDGE_DATA") or os.path.join(os.path.expanduser("~"), ".agent-bridge")


def _truthy(value: Any) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def read_toml(path: str) -> dict:
    """The config file at ``path``; ConfigError (one line) when unreadable, not TOML, or naming a
    section or key ``SCHEMA`` lacks (with the nearest valid name)."""
    try:
        with open(path, "rb") as f:
            toml = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}")
    except PermissionError:
        raise ConfigError(f"config file not readable: {path}")
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}")
    except OSError as exc:
        raise ConfigError(f"config file {path} unreadable: {exc.strerror}")
    wrong = unknown_name(toml, SCHEMA, path)
    if wrong:
        raise ConfigError(wrong)
    return toml


def read_stored_secret(data_dir: str, name: str, env_var: str, label: str) -> str:
    """A secret a running ``serve`` made, for a command on the user's terminal: ``$env_var`` if
    set, else ``<data-dir>/secrets/<name>``; never generated here. ``ConfigError`` with a one-line
    reason (naming ``label``, never the value) when there is none to read."""
    env = os.environ.get(env_var)
    if env:
        return env
    path = os.path.join(data_dir, "secrets", name)
    try:
        with open(path, "r", encoding="utf-8") as f:
            value = f.read().strip()
    except FileNotFoundError:
        # the commands reading it first check that a server runs there (bridge_core/running.py): that one
        # was given the secret in its environment, and keeps no copy
        raise ConfigError(f"no {label} stored in {data_dir} (its server was given ${env_var}): set {env_var} here too")
    except OSError as exc:
        raise ConfigError(f"cannot read the {label} ({exc.strerror or exc})")
    if not value:
        raise ConfigError(f"the {label} file {path} is empty")
    return value


def load_secret(data_dir: str, name: str, env: Optional[str]) -> tuple[str, Optional[str]]:
    """The secret from the environment, or from ``<data-dir>/secrets/<name>``, generated if missing.

    Returns the secret and the path it was stored at (None when it came from the environment).
    """
    sdir = private_dir(os.path.join(data_dir, "secrets"), files=True)  # an earlier secret written 0644 too
    if env:
        return env, None
    path = os.path.join(sdir, name)
    try:
        with open(path, "r", encoding="utf-8") as f:
            value = f.read().strip()
        if value:
            return value, path
    except FileNotFoundError:
        pass
    value = secrets.token_urlsafe(32)
    write_private(path, value + "\n")
    return value, path


NODE_ID_FILE = "node_id"
_NODE_ID_OK = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


# A URL's user:password@ (the password runs to the last "@" of the authority, as the PostgreSQL and
# Redis clients read it), and every password=... pair: a URL's query (?password=, &sslpassword=) or
# libpq's key=value form (password=x, password = 'a b'), quoted or not.
_URL_PASSWORD = re.compile(r"(?<=://)([^:/?#\s]*):[^/?#\s]*@")
_PASSWORD_PAIR = re.compile(r"(?i)((?:^|(?<=[\s?&;,(]))[\w.-]*password\s*=\s*)"  # the key, then its value:
                            r"""('(?:[^'\\]|\\.)*'?|"(?:[^"\\]|\\.)*"?|[^\s&#;,)]*)""")  # quoted or up to a separator


def mask_url(text: str) -> str:
    """``text`` (a store or bus URL, or a message quoting one) with every password shown as ``***``:
    ``user:***@``, ``password=***`` (docs/security.md, "Secrets"). The one rule for printing one."""
    return _PASSWORD_PAIR.sub(r"\1***", _URL_PASSWORD.sub(r"\1:***@", text))


def check_engines(store_url: Optional[str], bus_url: Optional[str]) -> None:
    """``--store`` / ``--bus`` as the contract allows them (one line of reason otherwise)."""
    if store_url and not store_url.startswith(("postgresql://", "postgres://")):
        raise ConfigError(f"--store must be a postgresql://USER@HOST:PORT/DB URL, not {store_url.split('://')[0]}://...")
    if bus_url:
        if not bus_url.startswith(("redis://", "rediss://")):
            raise ConfigError(f"--bus must be a redis://HOST:PORT/N URL, not {bus_url.split('://')[0]}://...")
        if not store_url:
            raise ConfigError("--bus needs a shared --store (postgresql://...): nodes on a bus share one store")


def bus_key_from(env: Any, toml_value: Any) -> str:
    """``AGENT_BRIDGE_CLUSTER_KEY``, else ``[bus] key``: what the cluster key is derived from instead of
    the shared secrets (docs/scale-out.md "Signed entries"); "" when neither is set. Never echoed."""
    for name, value in (("AGENT_BRIDGE_CLUSTER_KEY", env.get("AGENT_BRIDGE_CLUSTER_KEY")), ("bus.key", toml_value)):
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise ConfigError(f"{name} must be a string")
        if len(value) < MIN_SECRET_LENGTH:
            raise ConfigError(f"{name} is too short: it must have at least {MIN_SECRET_LENGTH} characters")
        return value
    return ""


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
    write_private(path, value + "\n")
    return value


def resolve_data_dir(args: dict, environ: Optional[dict] = None) -> str:
    """The data directory ``build_config`` will use (``--data-dir``, ``AGENT_BRIDGE_DATA``, the default),
    absolute; known before anything in it is read (a host locks it first: bridge_core/datadir.py)."""
    env = os.environ if environ is None else environ
    return os.path.abspath(os.path.expanduser(args.get("data_dir") or env.get("AGENT_BRIDGE_DATA") or default_data_dir()))


def build_config(args: dict, environ: Optional[dict] = None, *, with_secrets: bool = True) -> Config:
    """Merge flags (``args``: None means not given), environment and TOML into a Config."""
    env = os.environ if environ is None else environ
    data_dir = resolve_data_dir(args, env)
    config_path = args.get("config") or env.get("AGENT_BRIDGE_CONFIG")
    toml: dict = {}
    if config_path:
        toml = read_toml(config_path)
    elif os.path.exists(os.path.join(data_dir, "config.toml")):
        toml = read_toml(os.path.join(data_dir, "config.toml"))

    def pick(flag: str, *keys: str, default: Any = None) -> Any:
        declared(SCHEMA, keys)
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
    worker_quota = num("worker_quota_mb", ("lvmh", "worker_quota_mb"), DEFAULT_WORKER_QUOTA_MB)
    if not worker_quota >= 0:
        raise ConfigError("lvmh.worker_quota_mb must be a number of megabytes, 0 for no limit")

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
        loomi_pair_ttl=num("loomi_pair_ttl", ("loomi", "pair_ttl"), 300.0),
        retention_days=num("retention_days", ("attachments", "retention_days"), 7.0),
        approval_timeout=num("approval_timeout", ("demo", "approval_timeout"), 300.0),
        gitlab_url=str(env.get("LVMH_GITLAB_URL") or pick("gitlab_url", "lvmh", "gitlab_url", default="https://gitlab.com")),
        docker_url=env.get("LVMH_DOCKER_URL") or pick("docker_url", "lvmh", "docker_url"),
        worker_quota_mb=worker_quota,
        log_level=str(pick("log_level", "log_level", default="INFO")),
        log_format=str(pick("log_format", "log_format", default="text")),
        wrong_auth_rate=wrong_rate,
        unauth_per_address=int(unauth_cap),
        push=parse_push(toml.get("push")),
        extra=toml,
        store_url=args.get("store") or env.get("AGENT_BRIDGE_STORE") or pick("store", "store", "url"),
        bus_url=args.get("bus") or env.get("AGENT_BRIDGE_BUS") or pick("bus", "bus", "url"),
    )
    if cfg.log_level.upper() not in LOG_LEVELS:
        raise ConfigError(f"--log-level must be one of {', '.join(LOG_LEVELS)}, not {cfg.log_level!r}")
    apply_remote_options(cfg, args, toml)
    check_engines(cfg.store_url, cfg.bus_url)
    cfg.bus_key = bus_key_from(env, pick("bus_key", "bus", "key"))
    if bool(cfg.tls_cert) != bool(cfg.tls_key):
        raise ConfigError("--tls-cert and --tls-key go together")
    for path in (cfg.tls_cert, cfg.tls_key):
        if path and not os.access(path, os.R_OK):
            raise ConfigError(f"TLS file not readable: {path}")
    if cfg.log_format not in ("text", "json"):
        raise ConfigError(f"unknown log format {cfg.log_format!r}; choose text or json")
    port = args.get("metrics_port")
    port = env.get("AGENT_BRIDGE_METRICS_PORT") or None if port is None else port
    cfg.metrics = parse_metrics(port, args.get("metrics_host"), toml.get("metrics"), cfg.tls,
                                cfg.loomi_allow_insecure_bind)
    if with_secrets:
        for var in ("PHEBY_SECRET", "LVMH_TOKEN"):
            reason = weak_secret_reason(var, env.get(var))
            if reason:
                raise ConfigError(reason)
        try:
            private_dir(data_dir)  # 0700 even when it existed with wider modes (bridge_core/private.py)
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


# --- remote access: public URLs, public fingerprints, trusted proxies (docs/remote-access.md) ---------

PUBLIC_SCHEMES = {"pheby": ("ws", "wss"), "loomi": ("ws", "wss"), "lvmh": ("http", "https")}
WILDCARD_HOSTS = ("0.0.0.0", "::", "[::]", "")


def _pairs(value: Any, what: str) -> dict:
    """``NAME=VALUE,NAME=VALUE`` (a flag), or a TOML table, as a dict; ConfigError otherwise."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return {str(k).strip(): v for k, v in value.items()}
    out: dict = {}
    for item in str(value).split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, val = item.partition("=")
        if not sep or not name.strip() or not val.strip():
            raise ConfigError(f"{what}: {item!r} is not NAME=VALUE (e.g. {what} loomi=...)")
        out[name.strip()] = val.strip()
    return out


def validate_public_url(name: str, url: Any) -> str:
    """A front end's public URL as given, when it is one a client can be told; ConfigError (one line) otherwise.

    pheby and loomi: ``ws://`` or ``wss://``, a host, a path ending in ``/ws``; lvmh: ``http://`` or
    ``https://``, a host, no path (the web UI and its API live at the root of their origin: one
    hostname or port per front end, docs/remote-access.md). No user, query or fragment anywhere.
    """
    from urllib.parse import urlsplit

    if name not in PUBLIC_SCHEMES:
        raise ConfigError(f"--public-url: unknown front end {name!r}; choose from {', '.join(ALL_ADAPTERS)}")
    schemes = PUBLIC_SCHEMES[name]
    example = "wss://host.example.com/ws" if name != "lvmh" else "https://host.example.com"
    text = str(url).strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"--public-url {name}={text}: not a URL ({exc}); e.g. {name}={example}")
    if parts.scheme.lower() not in schemes or not parts.hostname:
        raise ConfigError(f"--public-url {name}={text}: must start with {' or '.join(s + '://' for s in schemes)} "
                          f"and name a host, e.g. {name}={example}")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ConfigError(f"--public-url {name}={text}: no user, query or fragment allowed; e.g. {name}={example}")
    if port == 0:
        raise ConfigError(f"--public-url {name}={text}: port 0 cannot be dialled")
    if name == "lvmh":
        if parts.path not in ("", "/"):
            raise ConfigError(f"--public-url lvmh={text}: no path allowed (the web UI is served at the root of "
                              "its own hostname or port), e.g. lvmh=https://lvmh.example.com")
        return f"{parts.scheme.lower()}://{parts.netloc}"
    if not parts.path.endswith("/ws"):
        raise ConfigError(f"--public-url {name}={text}: the path must end in /ws, e.g. {name}={example}")
    return f"{parts.scheme.lower()}://{parts.netloc}{parts.path}"


def dialable_host(host: str) -> str:
    """The host a client is told for a bind address: a wildcard (``0.0.0.0``, ``::``) becomes this
    machine's primary address (the one its default route leaves from; no packet is sent), else as is."""
    import socket

    if host not in WILDCARD_HOSTS:
        return host
    family, probe = (socket.AF_INET6, "2001:db8::1") if ":" in host else (socket.AF_INET, "192.0.2.1")
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((probe, 9))
            return str(s.getsockname()[0])
    except OSError:
        return socket.gethostname()


def bound_url(name: str, host: str, port: int, tls: bool) -> str:
    """The URL of a front end at its bound address (a wildcard made dialable): ws(s)://H:P/ws, http(s)://H:P."""
    h = dialable_host(host)
    h = f"[{h}]" if ":" in h else h
    if name == "lvmh":
        return f"{'https' if tls else 'http'}://{h}:{port}"
    return f"{'wss' if tls else 'ws'}://{h}:{port}/ws"


def served_directly(url: str, bound_port: Optional[int]) -> bool:
    """Whether clients of ``url`` reach the bridge's own listener (its port is the bound one), so they
    see the bridge's certificate; otherwise a proxy or a port forward presents its own."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme in ("wss", "https") else 80)
    return port == bound_port


def undialable_reason(url: str) -> Optional[str]:
    """Why a phone elsewhere cannot dial ``url`` (a loopback or wildcard host), or None."""
    from urllib.parse import urlsplit

    host = (urlsplit(url).hostname or "").strip("[]")
    if host in WILDCARD_HOSTS or host == "::":
        return f"{host or 'an empty host'} is a wildcard address, not one a phone can dial"
    if is_loopback(host):
        return f"{host} is loopback: only this machine can reach it"
    return None


def _fingerprint_hex(name: str, value: Any) -> str:
    hexstr = str(value).strip().lower().replace(":", "")
    if len(hexstr) != 64 or any(c not in "0123456789abcdef" for c in hexstr):
        raise ConfigError(f"--public-fp {name}=...: must be a SHA-256 fingerprint, 64 hex digits (colons allowed)")
    return hexstr


def parse_trusted_proxies(value: Any) -> tuple:
    """``CIDR,CIDR`` (a flag) or a TOML list as ``ipaddress`` networks; ConfigError naming the bad one."""
    import ipaddress

    if value is None:
        return ()
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    nets = []
    for item in items:
        item = str(item).strip()
        if not item:
            continue
        try:
            nets.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ConfigError(f"--trusted-proxy: {item!r} is not an address or CIDR (e.g. 127.0.0.1/32,10.0.0.0/8)")
    return tuple(nets)


def apply_remote_options(cfg: Config, args: dict, toml: dict) -> None:
    """``--public-url`` (and its alias ``--loomi-public-url``, and ``[loomi]``/``[lvmh] public_url``),
    ``--public-fp`` and ``--trusted-proxy``, flags over the file, validated into ``cfg``.

    In the file: ``public_url = "pheby=...,loomi=..."`` or a ``[public_url]`` table, likewise
    ``public_fp``; ``trusted_proxy = ["127.0.0.1/32"]`` (or a comma-separated string)."""
    urls: dict = {}
    for name in ("loomi", "lvmh"):  # the older per-front-end keys, overridden by everything below
        sec = toml.get(name)
        if isinstance(sec, dict) and sec.get("public_url"):
            urls[name] = sec["public_url"]
    urls.update(_pairs(toml.get("public_url"), "--public-url"))
    urls.update(_pairs(args.get("public_url"), "--public-url"))
    if args.get("loomi_public_url"):
        urls["loomi"] = args["loomi_public_url"]
    cfg.public_urls = {name: validate_public_url(name, url) for name, url in urls.items()}
    cfg.loomi_public_url = cfg.public_urls.get("loomi")
    fps = dict(_pairs(toml.get("public_fp"), "--public-fp"))
    fps.update(_pairs(args.get("public_fp"), "--public-fp"))
    for name in fps:
        if name != "loomi":
            raise ConfigError(f"--public-fp: only loomi=HEX is used (the Loomi QR code carries it), not {name!r}")
    cfg.public_fp = {name: _fingerprint_hex(name, v) for name, v in fps.items()}
    raw = args.get("trusted_proxy")
    cfg.trusted_proxies = parse_trusted_proxies(raw if raw is not None else toml.get("trusted_proxy"))


ENDPOINTS_FILE = "endpoints.json"  # <run-dir>/endpoints.json, written by the running server (cli/app.py)


def read_endpoints(run_dir: str) -> Optional[dict]:
    """What the running server tells clients: ``{"urls": {name: url}, "public": [names], "ports": ...,
    "tls": bool, "loomi_fp": hex}``, or None when no server wrote it."""
    import json

    try:
        with open(os.path.join(run_dir, ENDPOINTS_FILE), "r", encoding="utf-8") as f:
            info = json.load(f)
        return info if isinstance(info, dict) and isinstance(info.get("urls"), dict) else None
    except (OSError, ValueError):
        return None
