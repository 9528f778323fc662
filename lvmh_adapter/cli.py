"""``agent-bridge lvmh plugin-path``: where the installed pi extension is.

    pi -e "$(agent-bridge lvmh plugin-path)"
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

PLUGIN_FILE = "lvmh-agent.mjs"


def plugin_path() -> str:
    """Absolute path of the pi extension shipped with this package."""
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "pi_extension", PLUGIN_FILE)


def add_parser(subparsers: Any, common_options: Any) -> None:
    lvmh = subparsers.add_parser("lvmh", help="lvmh: the pi extension for mirroring pi sessions")
    sub = lvmh.add_subparsers(dest="lvmh_command", metavar="COMMAND")
    path = sub.add_parser("plugin-path", help="print the absolute path of the pi extension (pi -e <path>)")
    common_options(path)
    path.set_defaults(func=cmd_plugin_path)

    def usage(args: argparse.Namespace) -> int:
        lvmh.print_help()
        return 2

    lvmh.set_defaults(func=usage)


def cmd_plugin_path(args: argparse.Namespace) -> int:
    path = plugin_path()
    if not os.path.isfile(path):
        print(f"agent-bridge: the pi extension is missing from this install ({path})", file=sys.stderr)
        return 1
    print(path)
    return 0
