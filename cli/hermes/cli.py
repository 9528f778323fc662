"""``hermes loomi pair|devices|revoke``: the very same commands as ``agent-bridge loomi ...``.

Hermes hands a plugin's ``setup_fn`` the ``loomi`` sub-parser; we let
``loomi_adapter.cli.add_parser`` (the code behind ``agent-bridge loomi``) build
its sub-commands into it, so both entry points parse, talk to the running
server (with the admin key from the data directory, as ``agent-bridge loomi``
does) and print identically. Hermes ignores a command's return value, so the
exit status is passed on with ``sys.exit``.
"""

from __future__ import annotations

import argparse
import functools
import sys
from typing import Any, Callable


class _OneParser:
    """Stands in for ``subparsers``: ``add_parser`` returns Hermes's ``loomi`` parser."""

    def __init__(self, parser: argparse.ArgumentParser):
        self.parser = parser

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        if kwargs.get("description") and not self.parser.description:
            self.parser.description = kwargs["description"]
        return self.parser


def _exit_with(fn: Callable[[argparse.Namespace], Any]) -> Callable[[argparse.Namespace], Any]:
    @functools.wraps(fn)
    def run(args: argparse.Namespace) -> Any:
        from bridge_core.model.errors import ConfigError

        try:
            rc = fn(args)
        except ConfigError as exc:
            print(f"hermes loomi: {exc.message}", file=sys.stderr)
            sys.exit(2)
        if isinstance(rc, int) and rc != 0:
            sys.exit(rc)
        return rc

    run.__agent_bridge_wrapped__ = True  # type: ignore[attr-defined]
    return run


def _wrap_funcs(parser: argparse.ArgumentParser) -> None:
    """Wrap every ``func`` default in this parser tree so the exit status reaches the shell."""
    func = parser._defaults.get("func")  # noqa: SLF001 - argparse keeps defaults here
    if callable(func) and not getattr(func, "__agent_bridge_wrapped__", False):
        parser._defaults["func"] = _exit_with(func)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _wrap_funcs(sub)


def setup_loomi(parser: argparse.ArgumentParser) -> None:
    from ..config import build_config
    from ..main import common_options

    try:
        import loomi_adapter.cli as loomi_cli
    except ImportError:
        parser.set_defaults(func=_unavailable)
        return
    loomi_cli.add_parser(_OneParser(parser), common_options, build_config)
    _wrap_funcs(parser)
    if "func" not in parser._defaults:
        parser.set_defaults(func=lambda args: (parser.print_help(), sys.exit(2)))


def _unavailable(args: argparse.Namespace) -> None:
    print("hermes loomi: the Loomi front end is not available in this agent-bridge build", file=sys.stderr)
    sys.exit(2)


def register_cli(ctx: Any) -> None:
    ctx.register_cli_command(
        name="loomi",
        help="pair and manage Loomi phones (agent-bridge)",
        setup_fn=setup_loomi,
        handler_fn=None,
        description="Pair a Loomi phone with this Hermes gateway, list paired devices, revoke one.",
    )
