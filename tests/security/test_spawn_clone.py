"""The spawn's git scripts run for real (sh + git) against a loopback git HTTP server that
wants the GitLab token, with the containers' mounts replaced by temporary directories.

The attack: a worker owns the repo volume (root, writable) and leaves a poisoned ``.git``
behind for the next spawn: ``core.fsmonitor``, hooks, a credential helper, filters,
``include.path`` / ``includeIf``, ``core.hooksPath``, a ``commondir``, alternates, or a
symlinked ``.git``. Whatever it planted must never see the token: the token appears in no
output and no file, no planted command runs at all, and the legitimate path (first clone,
update of the existing checkout on respawn, the worker's own files kept) still works.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lvmh_adapter.spawn import CHECKOUT_SCRIPT, FETCH_SCRIPT, checkout_env, fetch_env

PAT = "glpat-CLONEsecret-0123456789abcdef"
GIT = shutil.which("git")
pytestmark = pytest.mark.skipif(GIT is None or shutil.which("sh") is None, reason="needs git and sh")


def _backend() -> str:
    exec_path = subprocess.run([GIT, "--exec-path"], capture_output=True, text=True, check=True).stdout.strip()
    return os.path.join(exec_path, "git-http-backend")


class GitServer:
    """``git http-backend`` over loopback HTTP; every request needs Basic ``oauth2:<PAT>``."""

    def __init__(self, root: str):
        self.root = root
        self.authorized = 0
        self.refused = 0
        backend = _backend()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    out = b""
                    while True:
                        size = int(self.rfile.readline().strip() or b"0", 16)
                        if size == 0:
                            self.rfile.readline()
                            return out
                        out += self.rfile.read(size)
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _serve(self):
                want = "Basic " + base64.b64encode(f"oauth2:{PAT}".encode()).decode()
                if self.headers.get("Authorization") != want:
                    outer.refused += 1
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="gitlab"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                outer.authorized += 1
                body = self._body() if self.command == "POST" else b""
                path, _, query = self.path.partition("?")
                env = {
                    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                    "GIT_PROJECT_ROOT": outer.root,
                    "GIT_HTTP_EXPORT_ALL": "1",
                    "REMOTE_USER": "oauth2",
                    "REQUEST_METHOD": self.command,
                    "PATH_INFO": path,
                    "QUERY_STRING": query,
                    "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                    "CONTENT_LENGTH": str(len(body)),
                    "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
                    "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
                }
                out = subprocess.run([backend], input=body, env=env, capture_output=True, check=False).stdout
                head, _, payload = out.partition(b"\r\n\r\n")
                status = 200
                headers = []
                for line in head.split(b"\r\n"):
                    k, _, v = line.decode().partition(":")
                    if k.lower() == "status":
                        status = int(v.strip().split()[0])
                    elif k:
                        headers.append((k, v.strip()))
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = _serve
            do_POST = _serve

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def git(*args, cwd=None, env=None) -> str:
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    base.update(env or {})
    proc = subprocess.run([GIT, *args], cwd=cwd, env=base, capture_output=True, text=True)
    assert proc.returncode == 0, (args, proc.stderr)
    return proc.stdout


class Layout:
    """The upstream repository and the directories that stand in for the volumes."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.upstream_root = tmp / "gitlab"
        self.upstream = self.upstream_root / "group" / "project.git"
        self.mirror = tmp / "mirror"  # the mirror volume (fetch: rw; checkout: ro)
        self.workspace = tmp / "workspace"  # the repo volume, which workers write
        self.marks = tmp / "marks"  # where planted commands would leave traces
        self.home = tmp / "home"
        for d in (self.mirror, self.workspace, self.marks, self.home):
            d.mkdir(parents=True)
        self.upstream.parent.mkdir(parents=True)
        git("init", "-q", "--bare", "-b", "main", str(self.upstream))
        self.src = tmp / "src"
        git("init", "-q", "-b", "main", str(self.src))
        git("remote", "add", "origin", str(self.upstream), cwd=self.src)
        self.commit("README.md", "v1\n", "first")
        git("checkout", "-q", "-b", "dev", cwd=self.src)
        self.commit("dev.txt", "dev\n", "dev work", branch="dev")
        git("checkout", "-q", "main", cwd=self.src)

    def commit(self, name, text, message, branch="main") -> str:
        (self.src / name).write_text(text)
        git("add", name, cwd=self.src)
        git("commit", "-q", "-m", message, cwd=self.src)
        git("push", "-q", "origin", f"HEAD:{branch}", cwd=self.src)
        return git("rev-parse", "HEAD", cwd=self.src).strip()

    def _run(self, script, env_list, extra):
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.home)}
        env.update(dict(e.split("=", 1) for e in env_list))
        env.update(extra)
        return subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, timeout=60)

    def fetch(self, url, token=PAT, **over):
        env_list = fetch_env(url, token)
        env = dict(e.split("=", 1) for e in env_list)
        env.update(over)
        return self._run(FETCH_SCRIPT, [f"{k}={v}" for k, v in env.items()], {"LVMH_MIRROR_DIR": str(self.mirror)})

    def checkout(self, url, branch=None):
        return self._run(CHECKOUT_SCRIPT, checkout_env(url, branch),
                         {"LVMH_MIRROR_DIR": str(self.mirror), "LVMH_WORKSPACE": str(self.workspace)})

    def head(self) -> str:
        return git("rev-parse", "HEAD", cwd=self.workspace).strip()

    def files_with(self, needle: bytes) -> list[str]:
        found = []
        for root, _dirs, files in os.walk(self.tmp):
            if root.startswith(str(self.upstream_root)):
                continue
            for name in files:
                path = os.path.join(root, name)
                if os.path.islink(path) or not os.path.isfile(path):
                    continue
                with open(path, "rb") as f:
                    if needle in f.read():
                        found.append(path)
        return found


def ok(proc):
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.fixture
def layout(tmp_path):
    return Layout(tmp_path)


@pytest.fixture
def server(layout):
    with GitServer(str(layout.upstream_root)) as srv:
        srv.url = f"http://127.0.0.1:{srv.port}/group/project.git"
        yield srv


def test_first_clone_then_update_on_respawn(layout, server):
    first = layout.commit("README.md", "v2\n", "second")
    out = [ok(layout.fetch(server.url)), ok(layout.checkout(server.url))]
    assert server.authorized > 0  # the token reached the server, through the helper
    assert layout.head() == first and (layout.workspace / "README.md").read_text() == "v2\n"
    assert git("remote", "get-url", "origin", cwd=layout.workspace).strip() == server.url  # no token in it
    # the worker works: an untracked file of its own
    (layout.workspace / "notes.txt").write_text("mine\n")
    # upstream moves on; a respawn updates the existing checkout and keeps the worker's file
    second = layout.commit("README.md", "v3\n", "third")
    out += [ok(layout.fetch(server.url)), ok(layout.checkout(server.url))]
    assert layout.head() == second and (layout.workspace / "README.md").read_text() == "v3\n"
    assert (layout.workspace / "notes.txt").read_text() == "mine\n"
    # a branch
    out += [ok(layout.fetch(server.url)), ok(layout.checkout(server.url, "dev"))]
    assert git("rev-parse", "--abbrev-ref", "HEAD", cwd=layout.workspace).strip() == "dev"
    assert (layout.workspace / "dev.txt").exists()
    for p in out:
        assert PAT not in p.stdout + p.stderr
    assert layout.files_with(PAT.encode()) == []


def test_fresh_clone_of_a_branch(layout, server):
    ok(layout.fetch(server.url))
    ok(layout.checkout(server.url, "dev"))
    assert git("rev-parse", "--abbrev-ref", "HEAD", cwd=layout.workspace).strip() == "dev"


def test_helper_answers_only_for_the_configured_host(layout, server):
    # the same server under another name: the helper stays silent, the fetch fails unauthenticated
    proc = layout.fetch(server.url, LVMH_GIT_HOST="gitlab.example.com")
    assert proc.returncode != 0 and server.authorized == 0 and server.refused > 0
    assert PAT not in proc.stdout + proc.stderr
    proc = layout.fetch(server.url, LVMH_GIT_PROTOCOL="https")
    assert proc.returncode != 0 and server.authorized == 0
    ok(layout.fetch(server.url))
    assert server.authorized > 0


def _plant(layout, gitdir):
    """Everything a worker could leave in a .git to run a command of its own."""
    marks = layout.marks
    spy = marks / "spy.sh"
    spy.write_text("#!/bin/sh\n"
                   f'name="$(basename "$0")"; env > "{marks}/ran.$name.$$"; '
                   f'printf "%s" "${{LVMH_GIT_TOKEN:-none}}" >> "{marks}/token.$name.$$"\n'
                   "cat >/dev/null 2>&1 || true\n"
                   "exit 0\n")
    spy.chmod(0o755)
    hooks = gitdir / "hooks"
    hooks.mkdir(exist_ok=True)
    for name in ("post-checkout", "post-merge", "pre-commit", "reference-transaction", "post-index-change",
                 "pre-auto-gc", "fsmonitor-watchman", "post-rewrite", "pre-push"):
        (hooks / name).write_text(f"#!/bin/sh\nexec {spy} \"$@\"\n")
        (hooks / name).chmod(0o755)
    alt_hooks = gitdir / "evilhooks"
    shutil.copytree(hooks, alt_hooks, dirs_exist_ok=True)
    evil_cfg = marks / "evil.config"
    evil_cfg.write_text(f"[core]\n\tfsmonitor = {spy}\n\thooksPath = {alt_hooks}\n")
    with open(gitdir / "config", "a") as f:
        f.write(f"[core]\n\tfsmonitor = {spy}\n\thooksPath = {alt_hooks}\n\tsshCommand = {spy}\n"
                f"\tpager = {spy}\n\taskPass = {spy}\n"
                f"[credential]\n\thelper = !{spy}\n"
                f"[include]\n\tpath = {evil_cfg}\n"
                f'[includeIf "gitdir:/"]\n\tpath = {evil_cfg}\n'
                f'[filter "evil"]\n\tsmudge = {spy}\n\tclean = {spy}\n\tprocess = {spy}\n\trequired = false\n'
                f'[remote "origin"]\n\tuploadpack = {spy}\n\treceivepack = {spy}\n'
                f"[uploadpack]\n\tpackObjectsHook = {spy}\n"
                f"[core]\n\talternateRefsCommand = {spy}\n")
    (layout.workspace / ".gitattributes").write_text("* filter=evil\n")
    other = layout.tmp / "othergit"
    if not other.exists():  # a common dir of the worker's own: git would read its config and hooks
        git("init", "-q", "--bare", str(other))
        shutil.copytree(gitdir / "objects", other / "objects", dirs_exist_ok=True)
        shutil.copytree(gitdir / "refs", other / "refs", dirs_exist_ok=True)
        with open(other / "config", "a") as f:
            f.write(f"[core]\n\tbare = false\n\tfsmonitor = {spy}\n")
        shutil.copytree(hooks, other / "hooks", dirs_exist_ok=True)
    (gitdir / "commondir").write_text(str(other) + "\n")
    (gitdir / "objects" / "info").mkdir(parents=True, exist_ok=True)
    (gitdir / "objects" / "info" / "alternates").write_text(str(other) + "/objects\n")
    return spy


def test_poisoned_git_dir_never_sees_the_token(layout, server):
    ok(layout.fetch(server.url))
    ok(layout.checkout(server.url))
    # the worker poisons its .git (and the tree) for the next spawn
    _plant(layout, layout.workspace / ".git")
    (layout.workspace / "local.txt").write_text("worker file\n")
    # control: the plant is live. Plain git in that tree with the token in its environment (what
    # the clone used to do) runs the worker's fsmonitor and hands it the token
    control = subprocess.run([GIT, "status"], cwd=layout.workspace, capture_output=True, text=True,
                             env={"PATH": os.environ["PATH"], "HOME": str(layout.home), "LVMH_GIT_TOKEN": PAT})
    assert control.returncode == 0, control.stderr
    assert any(n.startswith("token.") and PAT in (layout.marks / n).read_text() for n in os.listdir(layout.marks))
    for n in os.listdir(layout.marks):
        if n.startswith(("ran.", "token.")):
            os.unlink(layout.marks / n)
    new = layout.commit("README.md", "after poison\n", "upstream moved")
    runs = [layout.fetch(server.url), layout.checkout(server.url)]
    for p in runs:
        ok(p)
        assert PAT not in p.stdout + p.stderr
    ran = sorted(os.listdir(layout.marks))
    assert ran == ["evil.config", "spy.sh"], f"a planted command ran: {ran}"
    assert layout.files_with(PAT.encode()) == []
    # and the update still happened, with the worker's own file kept and the planted config gone
    assert layout.head() == new and (layout.workspace / "README.md").read_text() == "after poison\n"
    assert (layout.workspace / "local.txt").exists()
    cfg = (layout.workspace / ".git" / "config").read_text()
    for planted in ("fsmonitor", "hooksPath", "helper", "include", "filter", "uploadpack", "sshCommand"):
        assert planted not in cfg
    assert not (layout.workspace / ".git" / "commondir").exists()
    assert not any((layout.workspace / ".git" / "hooks").iterdir())
    # the next spawn is clean too (nothing was re-planted by the checkout)
    ok(layout.fetch(server.url))
    ok(layout.checkout(server.url))
    assert sorted(os.listdir(layout.marks)) == ["evil.config", "spy.sh"]


def test_symlinked_git_dir_is_replaced_by_a_fresh_clone(layout, server):
    ok(layout.fetch(server.url))
    ok(layout.checkout(server.url))
    # the worker swaps .git for a symlink to a poisoned repository of its own
    evil = layout.tmp / "evilrepo"
    shutil.copytree(layout.workspace / ".git", evil)
    _plant(layout, evil)
    shutil.rmtree(layout.workspace / ".git")
    os.symlink(evil, layout.workspace / ".git")
    runs = [ok(layout.fetch(server.url)), ok(layout.checkout(server.url))]
    for p in runs:
        assert PAT not in p.stdout + p.stderr
    assert "checking out afresh" in runs[1].stderr
    assert sorted(os.listdir(layout.marks)) == ["evil.config", "spy.sh"]
    gitdir = layout.workspace / ".git"
    assert gitdir.is_dir() and not gitdir.is_symlink()
    assert layout.head() == git("rev-parse", "main", cwd=layout.src).strip()
    assert layout.files_with(PAT.encode()) == []


def test_git_file_instead_of_dir_is_replaced(layout, server):
    ok(layout.fetch(server.url))
    evil = layout.tmp / "evilrepo2"
    git("init", "-q", str(evil))
    _plant(layout, evil / ".git")
    (layout.workspace / ".git").write_text(f"gitdir: {evil / '.git'}\n")
    ok(layout.checkout(server.url))
    assert (layout.workspace / ".git").is_dir()
    assert sorted(os.listdir(layout.marks)) == ["evil.config", "spy.sh"]


def test_fetch_container_never_reads_the_workspace(layout, server):
    """The token's container mounts the mirror only: a poisoned workspace (or HOME) cannot reach it."""
    ok(layout.fetch(server.url))
    ok(layout.checkout(server.url))
    _plant(layout, layout.workspace / ".git")
    # even a planted global config in HOME is ignored by the scripts
    (layout.home / ".gitconfig").write_text(f"[core]\n\tfsmonitor = {layout.marks / 'spy.sh'}\n"
                                            f"[credential]\n\thelper = !{layout.marks / 'spy.sh'}\n")
    ok(layout.fetch(server.url))
    assert sorted(os.listdir(layout.marks)) == ["evil.config", "spy.sh"]
    assert "/workspace" not in FETCH_SCRIPT and "LVMH_WORKSPACE" not in FETCH_SCRIPT
    assert "LVMH_GIT_TOKEN" not in CHECKOUT_SCRIPT and "safe.directory" not in FETCH_SCRIPT + CHECKOUT_SCRIPT
