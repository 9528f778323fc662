"""A fake Docker Engine API (the calls lvmh spawn makes), recording every request.

Listens on TCP loopback or a unix socket. Understands ``GET /version``, ``GET /_ping``
and, under ``/v<api>/``: volumes/create, images/{name}/json, images/create (pull), build,
containers/create, containers/json, containers/{id}/json|start|wait|logs|stop and
``DELETE containers/{id}``. Error bodies are ``{"message": ...}`` with content type
exactly ``application/json``, as the real engine sends them.

Short-lived git containers (label ``lvmh.role`` ``fetch`` or ``checkout``) exit with
``clone_exit`` (or ``role_exit[role]``) as soon as they are waited on, unless
``clone_gate`` is set: then their ``wait`` blocks until the gate opens (serialisation
tests). Other containers run until stopped, deleted or ``exit(id, code)``.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import io
import json
import re
import struct
import tarfile
from typing import Any, Optional

import attrs
from aiohttp import web

API = "1.50"
SHORT_LIVED = ("fetch", "checkout")  # the spawn's git containers


@attrs.define
class Req:
    method: str
    path: str  # as sent, with the /v1.50 prefix
    query: dict
    body: Any  # parsed JSON body, or None
    content_type: str = ""
    raw_len: int = 0

    @property
    def line(self) -> str:
        return f"{self.method} {self.path}"


@attrs.define(eq=False)
class Container:
    id: str
    name: str
    config: dict
    running: bool = False
    exit_code: Optional[int] = None
    exited: asyncio.Event = attrs.field(factory=asyncio.Event)
    logs: str = ""

    @property
    def labels(self) -> dict:
        return self.config.get("Labels") or {}

    @property
    def role(self) -> str:
        return self.labels.get("lvmh.role", "")

    def finish(self, code: int) -> None:
        self.running = False
        if self.exit_code is None:
            self.exit_code = code
        self.exited.set()


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=json.dumps(data).encode(), headers={"Content-Type": "application/json"})


def _err(status: int, message: str) -> web.Response:
    return _json({"message": message}, status)


def _frames(text: str, stream: int = 1) -> bytes:
    out = b""
    for line in text.splitlines(keepends=True):
        data = line.encode()
        out += struct.pack(">BxxxL", stream, len(data)) + data
    return out


class FakeDocker:
    def __init__(self) -> None:
        self.requests: list[Req] = []
        self.images: set[str] = {"lvmh-worker:latest", "alpine/git:latest"}
        self.volumes: dict[str, dict] = {}
        self.containers: dict[str, Container] = {}
        self.removed: list[Container] = []
        self.clone_exit = 0
        self.role_exit: dict[str, int] = {}  # e.g. {"checkout": 1}: that role's exit code
        self.clone_logs = "Cloning into '/workspace'...\n"
        self.worker_logs = "worker up\n"
        self.clone_gate: Optional[asyncio.Event] = None
        self.build_error: Optional[str] = None
        self.build_members: list[str] = []
        self.create_error: Optional[tuple[int, str]] = None  # for the worker container create
        self._runner: Optional[web.AppRunner] = None
        self._closing = asyncio.Event()
        self.url = ""

    # --- lifecycle ---------------------------------------------------------

    async def start(self, unix_path: Optional[str] = None) -> "FakeDocker":
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        if unix_path:
            site: web.BaseSite = web.UnixSite(self._runner, unix_path)
            await site.start()
            self.url = f"unix://{unix_path}"
        else:
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        return self

    async def stop(self) -> None:
        self._closing.set()
        if self.clone_gate is not None:
            self.clone_gate.set()
        for c in self.containers.values():
            c.exited.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # --- helpers for tests -------------------------------------------------

    def lines(self) -> list[str]:
        return [r.line for r in self.requests]

    def by_name(self, name: str) -> Container:
        for c in list(self.containers.values()) + self.removed:
            if c.name == name:
                return c
        raise KeyError(name)

    def exit(self, container_id: str, code: int) -> None:
        self.containers[container_id].finish(code)

    # --- dispatch ----------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body: Any = None
        ctype = request.headers.get("Content-Type", "")
        if raw and "json" in ctype:
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
        self.requests.append(Req(request.method, request.path, dict(request.query), body, ctype, len(raw)))
        path = request.path
        if path == "/version":
            return _json({"ApiVersion": API, "MinAPIVersion": "1.24", "Version": "28.2.2", "Os": "linux"})
        if path == "/_ping":
            return web.Response(text="OK")
        m = re.match(r"^/v\d+\.\d+(/.*)$", path)
        if not m:
            return _err(404, "page not found")
        sub, meth = m.group(1), request.method
        if sub == "/version":
            return _json({"ApiVersion": API, "MinAPIVersion": "1.24", "Version": "28.2.2", "Os": "linux"})
        if sub == "/_ping":
            return web.Response(text="OK")
        if meth == "POST" and sub == "/volumes/create":
            return self._volume_create(body)
        if meth == "POST" and sub == "/images/create":
            return await self._pull(request)
        if meth == "POST" and sub == "/build":
            return await self._build(request, raw)
        mi = re.match(r"^/images/(.+)/json$", sub)
        if meth == "GET" and mi:
            name = mi.group(1)
            if name in self.images:
                return _json({"Id": "sha256:" + hashlib.sha256(name.encode()).hexdigest(), "RepoTags": [name]})
            return _err(404, f"No such image: {name}")
        if meth == "POST" and sub == "/containers/create":
            return self._create(request, body)
        if meth == "GET" and sub == "/containers/json":
            return self._list(request)
        mc = re.match(r"^/containers/([^/]+)(/[a-z]+)?$", sub)
        if mc:
            c = self.containers.get(mc.group(1))
            if c is None:
                return _err(404, f"No such container: {mc.group(1)}")
            action = mc.group(2) or ""
            if meth == "POST" and action == "/start":
                if c.running:
                    return web.Response(status=304)
                c.running = True
                return web.Response(status=204)
            if meth == "POST" and action == "/wait":
                return await self._wait(c)
            if meth == "GET" and action == "/json":
                return _json({"Id": c.id, "Name": "/" + c.name, "Config": {"Tty": False, "Labels": c.labels},
                              "State": {"Status": "running" if c.running else "exited", "Running": c.running,
                                        "ExitCode": c.exit_code or 0}})
            if meth == "GET" and action == "/logs":
                resp = web.Response(status=200, body=_frames(c.logs, 1),
                                    headers={"Content-Type": "application/vnd.docker.multiplexed-stream"})
                return resp
            if meth == "POST" and action == "/stop":
                if not c.running:
                    return web.Response(status=304)
                c.finish(143)
                return web.Response(status=204)
            if meth == "DELETE" and action == "":
                if c.running and request.query.get("force") not in ("1", "true", "True"):
                    return _err(409, f"cannot remove container {c.id}: container is running")
                c.finish(137)
                del self.containers[c.id]
                self.removed.append(c)
                return web.Response(status=204)
        return _err(404, f"fake engine: no route for {meth} {sub}")

    def _volume_create(self, body: Any) -> web.Response:
        if not isinstance(body, dict) or not isinstance(body.get("Name"), str):
            return _err(400, "bad volume config")
        name = body["Name"]
        vol = self.volumes.setdefault(name, {"Name": name, "Driver": "local", "Labels": body.get("Labels") or {},
                                             "Mountpoint": f"/var/lib/docker/volumes/{name}/_data"})
        return _json(vol, 201)

    async def _pull(self, request: web.Request) -> web.StreamResponse:
        image = request.query.get("fromImage", "")
        tag = request.query.get("tag")
        if tag and ":" not in image.rsplit("/", 1)[-1]:
            image = f"{image}:{tag}"
        self.images.add(image)
        lines = [{"status": f"Pulling from {image}"}, {"status": f"Status: Downloaded newer image for {image}"}]
        return web.Response(body=b"".join(json.dumps(x).encode() + b"\r\n" for x in lines),
                            headers={"Content-Type": "application/json"})

    async def _build(self, request: web.Request, raw: bytes) -> web.StreamResponse:
        try:
            data = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                self.build_members = tar.getnames()
        except (OSError, tarfile.TarError):
            return _err(400, "build context is not a tar")
        dockerfile = request.query.get("dockerfile", "Dockerfile")
        if dockerfile not in self.build_members:
            lines = [{"errorDetail": {"message": f"Cannot locate specified Dockerfile: {dockerfile}"},
                      "error": f"Cannot locate specified Dockerfile: {dockerfile}"}]
        elif self.build_error:
            lines = [{"stream": "Step 1/2 : FROM node:22\n"},
                     {"errorDetail": {"message": self.build_error}, "error": self.build_error}]
        else:
            self.images.add(request.query.get("t", ""))
            lines = [{"stream": "Step 1/2 : FROM node:22\n"}, {"aux": {"ID": "sha256:" + "b" * 64}},
                     {"stream": f"Successfully tagged {request.query.get('t')}\n"}]
        return web.Response(body=b"".join(json.dumps(x).encode() + b"\r\n" for x in lines),
                            headers={"Content-Type": "application/json"})

    def _create(self, request: web.Request, body: Any) -> web.Response:
        if not isinstance(body, dict) or not isinstance(body.get("Image"), str):
            return _err(400, "bad container config")
        name = request.query.get("name", "")
        if body["Image"] not in self.images:
            return _err(404, f"No such image: {body['Image']}")
        if any(c.name == name for c in self.containers.values()):
            return _err(409, f'Conflict. The container name "/{name}" is already in use')
        if self.create_error and (body.get("Labels") or {}).get("lvmh.role") not in SHORT_LIVED:
            return _err(*self.create_error)
        cid = hashlib.sha256(f"{name}-{len(self.requests)}".encode()).hexdigest()
        c = Container(cid, name, body)
        c.logs = self.clone_logs if c.role in SHORT_LIVED else self.worker_logs
        self.containers[cid] = c
        return _json({"Id": cid, "Warnings": []}, 201)

    def _list(self, request: web.Request) -> web.Response:
        try:
            filters = json.loads(request.query.get("filters", "{}"))
        except ValueError:
            return _err(400, "bad filters")
        want = [tuple(f.split("=", 1)) if "=" in f else (f, None) for f in filters.get("label", [])]
        all_ = request.query.get("all") in ("1", "true", "True")
        out = []
        for c in self.containers.values():
            if not all_ and not c.running:
                continue
            if all((k in c.labels) and (v is None or c.labels[k] == v) for k, v in want):
                out.append({"Id": c.id, "Names": ["/" + c.name], "Image": c.config["Image"], "Labels": c.labels,
                            "State": "running" if c.running else "exited"})
        return _json(out)

    async def _wait(self, c: Container) -> web.Response:
        if c.role in SHORT_LIVED and c.exit_code is None:
            if self.clone_gate is not None:
                await self.clone_gate.wait()
            c.finish(self.role_exit.get(c.role, self.clone_exit))
        await c.exited.wait()
        if self._closing.is_set() and c.exit_code is None:
            return _err(500, "engine shutting down")
        return _json({"StatusCode": c.exit_code, "Error": None})
