"""An unusable data directory is a one-line error and a non-zero exit, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

EXE = [sys.executable, "-m", "cli", "serve", "--pheby-port", "0", "--loomi-port", "0", "--lvmh-port", "0"]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(data_dir: str, **env: str) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k not in ("PHEBY_SECRET", "LVMH_TOKEN")}
    e.update(env)
    return subprocess.run(EXE + ["--data-dir", data_dir], capture_output=True, text=True, timeout=30, cwd=ROOT, env=e)


def test_data_dir_under_a_file(tmp_path):
    (tmp_path / "plain").write_text("not a directory")
    proc = _run(str(tmp_path / "plain" / "data"))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith("agent-bridge: cannot use the data directory")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_database_that_cannot_be_opened(tmp_path):
    data = tmp_path / "data"
    (data / "bridge.db").mkdir(parents=True)  # where the database file should be
    proc = _run(str(data), PHEBY_SECRET="s" * 20, LVMH_TOKEN="t" * 20)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("agent-bridge: cannot open the database in"), proc.stderr
