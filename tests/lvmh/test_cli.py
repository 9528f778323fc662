"""``agent-bridge lvmh plugin-path``."""

from __future__ import annotations

import os
import subprocess
import sys

from cli.main import main


def test_plugin_path_prints_the_installed_extension(capsys):
    assert main(["lvmh", "plugin-path"]) == 0
    out = capsys.readouterr().out.strip()
    assert os.path.isabs(out) and out.endswith(os.path.join("pi_extension", "lvmh-agent.mjs"))
    assert os.path.isfile(out)
    with open(out, encoding="utf-8") as f:
        assert "export default" in f.read()


def test_plugin_path_accepts_common_options(tmp_path, capsys):
    assert main(["lvmh", "plugin-path", "--data-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip().endswith("lvmh-agent.mjs")


def test_lvmh_without_a_subcommand_prints_help(capsys):
    assert main(["lvmh"]) == 2
    assert "plugin-path" in capsys.readouterr().out


def test_plugin_path_from_the_console_script():
    proc = subprocess.run([sys.executable, "-m", "cli", "lvmh", "plugin-path"], capture_output=True, text=True,
                          timeout=60, cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("lvmh-agent.mjs")
