"""Configuration: the options, environment variables and TOML file of docs/usage.md ("Running it", "The config file").

Precedence: command-line flags, then environment variables, then the TOML
file (``--config`` or ``<data-dir>/config.toml``), then defaults. Missing
secrets are generated and stored in the data directory with owner-only
permissions; only their path is ever printed.

The core reads its own sections here. Each front end parses its own: it declares a
``FrontEndPart`` (``pheby_adapter/config.py``, ``loomi_adapter/config.py``,
``lvmh_adapter/config.py``): its section's keys, its default port, the form of its public
URL, its secret, and a parser of its settings (``Config.frontend(name)``). A host assembles
the core's schema and the front ends' parts it was built with (``cli/config.py``) and passes
the parts to ``build_config``; the file is checked against the whole schema, so a
misspelt name is refused with the nearest one (``model/config_schema.py``).
"""

from __future__ import annotations

import os
import secrets
import tomllib
from typing import Any, Callable, Mapping, Optional, Sequence

import attrs

from ..bridge.private import private_dir, write_private
from ..model.config_schema import TOP, Section, declared, unknown_name
from ..model.errors import ConfigError
from .remote import PublicForm, fingerprint_hex, pairs, parse_trusted_proxies, validate_public_url
from .security import (DEFAULT_UNAUTH_PER_ADDRESS, DEFAULT_WRONG_RATE, MIN_SECRET_LENGTH, is_loopback,
                       weak_secret_reason)

DEFAULT_METRICS_PORT = 8699  # [metrics] port (docs/operations.md)
# a plain (no TLS) bind on a non-loopback address allowed, for every front end and the metrics; the
# variable's name is its first user's (and a front end may name a key of its section that allows it
# too: FrontEndPart.insecure_bind_key)
INSECURE_BIND_ENV = "LOOMI_ALLOW_INSECURE_BIND"


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
                          f"{INSECURE_BIND_ENV}=true (docs/operations.md)")
    return cfg


# --- the front ends' parts -------------------------------------------------------


@attrs.frozen
class Secret:
    """A front end's shared secret: ``$env``, else ``<data-dir>/secrets/<file>`` (generated once)."""

    file: str  # pheby_secret
    env: str  # PHEBY_SECRET
    label: str  # "Pheby secret", in messages (never the value)


@attrs.frozen
class FrontEndPart:
    """What a front end declares of the configuration (its ``config.py``): the core reads the rest."""

    name: str  # its section, its name in --adapters, --public-url, --NAME-port
    port: int  # its default port
    keys: tuple[str, ...]  # its section's keys: what its parser and its server read
    public: PublicForm  # the form of its URL (--public-url, and the bound address it is told)
    secret: Optional[Secret] = None
    parse: Callable[["Source"], Any] = lambda src: None  # its settings (Config.frontend(name))
    label: str = ""  # its name in prose ("Loomi")
    pinned: bool = False  # its QR code carries a certificate pin: --public-fp NAME=HEX
    url_flag: bool = False  # --NAME-public-url, its alias of --public-url NAME=URL (from before that)
    insecure_bind_key: Optional[str] = None  # a key of its section that also allows a plain non-loopback bind


@attrs.frozen
class Source:
    """Where a setting comes from: a flag (``args``; None: not given), the environment, the file.

    ``pick`` and ``num`` read a flag over the file (a setting with an environment variable reads
    ``env`` first itself); a key the schema lacks cannot be read (``UndeclaredKey``)."""

    args: Mapping[str, Any]
    env: Mapping[str, str]
    toml: Mapping[str, Any]
    schema: Mapping[str, frozenset]

    def pick(self, flag: str, *keys: str, default: Any = None) -> Any:
        declared(self.schema, keys)
        if self.args.get(flag) is not None:
            return self.args[flag]
        node: Any = self.toml
        for k in keys:
            if not isinstance(node, dict) or k not in node:
                return default
            node = node[k]
        return node

    def num(self, flag: str, keys: tuple, default: float) -> float:
        val = self.pick(flag, *keys, default=default)
        try:
            return float(val)
        except (TypeError, ValueError):
            raise ConfigError(f"{'.'.join(keys)} must be a number, not {val!r}")


# --- the config file's schema: each section and the keys its parser reads (model/config_schema.py) ----
# A file naming anything else is refused with the nearest name; a parser reading a key missing here fails.

CORE_SCHEMA: dict[str, frozenset] = {k: frozenset(v) for k, v in {
    TOP: ("adapters", "agent", "host", "log_level", "log_format", "public_url", "public_fp", "trusted_proxy"),
    "tls": ("cert", "key", "watch_interval"),  # watch_interval: cli/app.py
    "attachments": ("retention_days",),
    "demo": ("approval_timeout",),
    "security": ("wrong_attempts_per_second", "unauthenticated_per_address"),
    "push": tuple(attrs.fields_dict(PushConfig)),
    "store": ("url",),
    "bus": ("url", "key"),
    "node": ("id",),
    "metrics": ("port", "host", "token"),
}.items()}
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def schema_for(parts: Sequence[FrontEndPart]) -> dict[str, frozenset]:
    """The whole schema: the core's sections, each front end's, and the front ends' names under
    ``[public_url]`` and ``[public_fp]`` (also top-level ``NAME=URL,...`` strings)."""
    names = frozenset(p.name for p in parts)
    return {**CORE_SCHEMA, **{p.name: frozenset(p.keys) for p in parts}, "public_url": names, "public_fp": names}


@attrs.define
class Config:
    data_dir: str
    agent: str = "demo"
    adapters: tuple[str, ...] = ()  # the front ends to start
    host: str = "127.0.0.1"
    ports: dict = attrs.field(factory=dict)  # front end -> its port
    tls_cert: Optional[str] = None
    tls_key: Optional[str] = None
    secrets: dict = attrs.field(factory=dict, repr=False)  # front end -> its shared secret (FrontEndPart.secret)
    frontends: dict = attrs.field(factory=dict)  # front end -> its settings (FrontEndPart.parse)
    allow_insecure_bind: bool = False  # a plain non-loopback bind (INSECURE_BIND_ENV)
    retention_days: float = 7.0
    approval_timeout: float = 300.0
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
    schema: dict = attrs.field(factory=lambda: dict(CORE_SCHEMA), repr=False)  # what ``extra`` may hold
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
        """``[name]`` of the config file (empty when absent); reading a key the schema lacks raises."""
        val = self.extra.get(name)
        return Section(name, val if isinstance(val, dict) else {}, self.schema)

    def frontend(self, name: str) -> Any:
        """Front end ``name``'s settings, as its part parsed them (None when it declares none)."""
        return self.frontends.get(name)

    def secret(self, name: str) -> str:
        """Front end ``name``'s shared secret ("" when not loaded: ``build_config(with_secrets=False)``)."""
        return self.secrets.get(name, "")


def default_data_dir() -> str:
    return os.environ.get("AGENT_BRIDGE_DATA") or os.path.join(os.path.expanduser("~"), ".agent-bridge")


def _truthy(value: Any) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def read_toml(path: str, schema: Mapping[str, frozenset]) -> dict:
    """The config file at ``path``; ConfigError (one line) when unreadable, not TOML, or naming a
    section or key ``schema`` lacks (with the nearest valid name)."""
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
    wrong = unknown_name(toml, schema, path)
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
        # the commands reading it first check that a server runs there (bridge_core/kit/running.py): that one
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
    absolute; known before anything in it is read (a host locks it first: bridge_core/kit/datadir.py)."""
    env = os.environ if environ is None else environ
    return os.path.abspath(os.path.expanduser(args.get("data_dir") or env.get("AGENT_BRIDGE_DATA") or default_data_dir()))


def build_config(args: dict, environ: Optional[Mapping[str, str]] = None, *, parts: Sequence[FrontEndPart] = (),
                 with_secrets: bool = True) -> Config:
    """Merge flags (``args``: None means not given), environment and TOML into a Config, with the
    front ends ``parts`` declare (the host's: ``cli/config.py``)."""
    env = os.environ if environ is None else environ
    data_dir = resolve_data_dir(args, env)
    schema = schema_for(parts)
    config_path = args.get("config") or env.get("AGENT_BRIDGE_CONFIG")
    toml: dict = {}
    if config_path:
        toml = read_toml(config_path, schema)
    elif os.path.exists(os.path.join(data_dir, "config.toml")):
        toml = read_toml(os.path.join(data_dir, "config.toml"), schema)
    src = Source(args, env, toml, schema)
    cfg = Config(
        data_dir=data_dir,
        adapters=_adapters(src, parts),
        ports=_ports(src, parts),
        extra=toml,
        schema=schema,
        store_url=args.get("store") or env.get("AGENT_BRIDGE_STORE") or src.pick("store", "store", "url"),
        bus_url=args.get("bus") or env.get("AGENT_BRIDGE_BUS") or src.pick("bus", "bus", "url"),
    )
    _core_settings(cfg, src, parts)
    if cfg.log_level.upper() not in LOG_LEVELS:
        raise ConfigError(f"--log-level must be one of {', '.join(LOG_LEVELS)}, not {cfg.log_level!r}")
    apply_remote_options(cfg, args, toml, parts)
    check_engines(cfg.store_url, cfg.bus_url)
    cfg.bus_key = bus_key_from(env, src.pick("bus_key", "bus", "key"))
    if bool(cfg.tls_cert) != bool(cfg.tls_key):
        raise ConfigError("--tls-cert and --tls-key go together")
    for path in (cfg.tls_cert, cfg.tls_key):
        if path and not os.access(path, os.R_OK):
            raise ConfigError(f"TLS file not readable: {path}")
    if cfg.log_format not in ("text", "json"):
        raise ConfigError(f"unknown log format {cfg.log_format!r}; choose text or json")
    port = args.get("metrics_port")
    port = env.get("AGENT_BRIDGE_METRICS_PORT") or None if port is None else port
    cfg.metrics = parse_metrics(port, args.get("metrics_host"), toml.get("metrics"), cfg.tls, cfg.allow_insecure_bind)
    if with_secrets:
        _load_secrets(cfg, src, parts)
    return cfg


def _adapters(src: Source, parts: Sequence[FrontEndPart]) -> tuple[str, ...]:
    """``--adapters``: the front ends to start, each one of ``parts``."""
    names = tuple(p.name for p in parts)
    raw = src.pick("adapters", "adapters", default=",".join(names))
    adapters = tuple(a.strip() for a in raw.split(",") if a.strip()) if isinstance(raw, str) else tuple(raw)
    for a in adapters:
        if a not in names:
            raise ConfigError(f"unknown adapter {a!r}; choose from {', '.join(names)}")
    if not adapters:
        raise ConfigError("no adapters selected")
    return adapters


def _ports(src: Source, parts: Sequence[FrontEndPart]) -> dict[str, int]:
    """``--NAME-port`` / ``[NAME] port`` of every front end (its part's port by default)."""
    ports = {}
    for part in parts:
        name = part.name
        val = src.pick(f"{name}_port", name, "port", default=part.port)
        try:
            port = int(val)
        except (TypeError, ValueError):
            raise ConfigError(f"{name} port must be a number, not {val!r}")
        if not 0 <= port <= 65535:
            raise ConfigError(f"{name} port {port} out of range")
        ports[name] = port
    return ports


def _core_settings(cfg: Config, src: Source, parts: Sequence[FrontEndPart]) -> None:
    """The core's settings (``[security]``, ``[attachments]``, ``[demo]``, ``[push]``, ...), then each
    front end's (its part's parser)."""
    wrong_rate = src.num("wrong_auth_rate", ("security", "wrong_attempts_per_second"), DEFAULT_WRONG_RATE)
    if not wrong_rate > 0:
        raise ConfigError("security.wrong_attempts_per_second must be a positive number")
    unauth_cap = src.num("unauth_per_address", ("security", "unauthenticated_per_address"), DEFAULT_UNAUTH_PER_ADDRESS)
    if unauth_cap < 1 or unauth_cap != int(unauth_cap):
        raise ConfigError("security.unauthenticated_per_address must be a whole number of at least 1")
    cfg.wrong_auth_rate, cfg.unauth_per_address = wrong_rate, int(unauth_cap)
    cfg.frontends = {p.name: p.parse(src) for p in parts}
    insecure = next((src.pick(f"{p.name}_{p.insecure_bind_key}", p.name, p.insecure_bind_key, default=False)
                     for p in parts if p.insecure_bind_key), False)  # fmt: skip
    cfg.allow_insecure_bind = _truthy(src.env.get(INSECURE_BIND_ENV, insecure))
    cfg.retention_days = src.num("retention_days", ("attachments", "retention_days"), 7.0)
    cfg.approval_timeout = src.num("approval_timeout", ("demo", "approval_timeout"), 300.0)
    cfg.agent = str(src.pick("agent", "agent", default="demo"))
    cfg.host = str(src.pick("host", "host", default="127.0.0.1"))
    cfg.tls_cert, cfg.tls_key = src.pick("tls_cert", "tls", "cert"), src.pick("tls_key", "tls", "key")
    cfg.log_level = str(src.pick("log_level", "log_level", default="INFO"))
    cfg.log_format = str(src.pick("log_format", "log_format", default="text"))
    cfg.push = parse_push(src.toml.get("push"))


def _load_secrets(cfg: Config, src: Source, parts: Sequence[FrontEndPart]) -> None:
    """The front ends' secrets (from the environment, else stored, generated once) and this node's name."""
    env, data_dir = src.env, cfg.data_dir
    declared_secrets = [(p.name, p.secret) for p in parts if p.secret is not None]
    for _, secret in declared_secrets:
        reason = weak_secret_reason(secret.env, env.get(secret.env))
        if reason:
            raise ConfigError(reason)
    try:
        private_dir(data_dir)  # 0700 even when it existed with wider modes (bridge/private.py)
        for name, secret in declared_secrets:
            cfg.secrets[name], path = load_secret(data_dir, secret.file, env.get(secret.env))
            if path:
                cfg.secret_paths[secret.file] = path
    except OSError as exc:
        raise ConfigError(f"cannot use the data directory {data_dir}: {exc.strerror or exc}")
    try:
        cfg.node_id = load_node_id(data_dir, src.args.get("node_id") or env.get("AGENT_BRIDGE_NODE_ID")
                                   or src.pick("node_id", "node", "id"))  # fmt: skip
    except OSError as exc:
        raise ConfigError(f"cannot keep the node id in {data_dir}: {exc.strerror or exc}")


# --- remote access: public URLs, public fingerprints, trusted proxies (docs/remote-access.md) ---------


def apply_remote_options(cfg: Config, args: Mapping[str, Any], toml: Mapping[str, Any],
                         parts: Sequence[FrontEndPart]) -> None:  # fmt: skip
    """``--public-url`` (and the older ``--NAME-public-url`` and ``[NAME] public_url`` of a front end that
    has them), ``--public-fp`` and ``--trusted-proxy``, flags over the file, validated into ``cfg``
    (the rules: remote.py).

    In the file: ``public_url = "pheby=...,loomi=..."`` or a ``[public_url]`` table, likewise
    ``public_fp``; ``trusted_proxy = ["127.0.0.1/32"]`` (or a comma-separated string)."""
    urls: dict = {}
    for part in parts:  # the older per-front-end keys, overridden by everything below
        sec = toml.get(part.name)
        if "public_url" in part.keys and isinstance(sec, dict) and sec.get("public_url"):
            urls[part.name] = sec["public_url"]
    urls.update(pairs(toml.get("public_url"), "--public-url"))
    urls.update(pairs(args.get("public_url"), "--public-url"))
    for part in parts:
        if part.url_flag and args.get(f"{part.name}_public_url"):
            urls[part.name] = args[f"{part.name}_public_url"]
    forms = {p.name: p.public for p in parts}
    cfg.public_urls = {name: validate_public_url(name, url, forms) for name, url in urls.items()}
    fps = dict(pairs(toml.get("public_fp"), "--public-fp"))
    fps.update(pairs(args.get("public_fp"), "--public-fp"))
    pinned = [p for p in parts if p.pinned]
    for name in fps:
        if name not in {p.name for p in pinned}:
            raise ConfigError(f"--public-fp: only {' or '.join(f'{p.name}=HEX' for p in pinned)} is used (the "
                              f"{' or '.join(p.label for p in pinned)} QR code carries it), not {name!r}")
    cfg.public_fp = {name: fingerprint_hex(name, v) for name, v in fps.items()}
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
