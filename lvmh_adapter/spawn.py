"""Spawned agent sessions: fetch a GitLab repo, check it out into a volume, run a pi worker container.

``POST /api/spawn {repo, branch?}`` follows the lvmh spec's four steps through the
Docker Engine API (aiodocker); docs/security.md ("Worker containers and spawn") says why
it is shaped this way:

1. per repository two volumes, named by the spec's slug (``/`` -> ``-``) plus a short hash
   of the path (``team-a/tools`` and ``team/a-tools`` differ): ``lvmh-mirror-<key>``, a bare
   mirror no worker ever mounts, and ``lvmh-repo-<key>``, the tree workers use. A fetch
   container (``[lvmh] git_image``, default ``alpine/git:latest``) with the GitLab PAT
   mounts the mirror only and fetches into it (``FETCH_SCRIPT``); a checkout container
   without any token mounts the mirror read-only and the repo volume and updates the tree
   (``CHECKOUT_SCRIPT``, with what a worker could have planted in ``.git`` removed).
   Spawns of one repository are serialised by an asyncio.Lock. The PAT reaches git through
   the fetch container's environment and a credential helper that answers only for
   ``LVMH_GITLAB_URL``'s host: never in argv, never in any ``.git/config``.
2. image ``lvmh-worker:latest``, built when missing: by default from the worker this package
   ships (context: the ``lvmh_adapter`` folder, Dockerfile ``worker/Dockerfile``), or from
   ``docker/worker.Dockerfile`` of ``[lvmh] worker_context`` (``[lvmh] worker_dockerfile``);
   container with env ``LVMH_TOKEN`` (a worker credential of its own, lvmh_adapter/auth.py:
   never the user's token), ``LVMH_URL``, ``LVMH_SESSION_ID``, ``LVMH_REPO``,
   ``LVMH_AGENT=1``, ``ZAI_RENAUD_API_KEY`` (passed through from the daemon's
   environment), the repo volume at ``/workspace``, the session's own sessions volume
   ``lvmh-sessions-<sessionId>`` at ``/pi-sessions``, ``models.json``
   (``[lvmh] models_json``) bind-mounted read-only, labelled ``lvmh.session=<id>`` so
   ``DELETE /api/sessions/:id/container`` finds it (and revokes the worker's credential).
3. the container runs ``node /bridge/index.mjs``; its plugin's ``hello`` registers the session.
4. the response ``{sessionId, containerId}`` is returned right after the container
   starts; the job runs in a TaskSet task (a client that hangs up does not stop it) and
   keeps watching the container until it exits. ``GET /api/spawn/status`` lists jobs.

The engine: ``[lvmh] docker_url`` / ``LVMH_DOCKER_URL``, else the spec's
``LVMH_CONTAINER_DOCKER_SOCK``, else ``DOCKER_HOST``, else ``/var/run/docker.sock``. With no
engine reachable ``GET /api/spawn/status`` is ``[]`` (the reason in the
``X-Lvmh-Spawn-Unavailable`` header) and spawn and container calls answer 503
``{"error": "Docker engine not reachable at <url>"}``. Secrets (LVMH tokens, provider key,
PAT) are never logged.
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Optional

import aiohttp
import attrs
from aiohttp import web
from yarl import URL

from bridge_core.kit.security import is_loopback
from bridge_core.model.errors import BridgeError
from bridge_core.bridge.tasks import TaskSet

from .auth import WorkerCredentials
from .errors import rest_error
from .gitlab import PAT_KEY
from .request import read_json
from .spawnplan import (  # noqa: F401  (re-exported: tests and tools import them from here)
    WORKER_IMAGE,
    GIT_IMAGE,
    UNAVAILABLE_HEADER,
    MIRROR_DIR,
    WORKER_DOCKERFILE,
    PACKAGE_DIR,
    SHIPPED_DOCKERFILE,
    MODELS_JSON_TARGET,
    WORKER_CMD,
    ACTIVE_STATES,
    TERMINAL_STATES,
    _WORKER_TOKEN,
    _SESSION,
    FETCH_SCRIPT,
    CHECKOUT_SCRIPT,
    SpawnError,
    valid_repo,
    valid_branch,
    _number,
    repo_volume,
    mirror_volume,
    sessions_volume,
    git_host,
    fetch_env,
    checkout_env,
    docker_url_of,
    container_host,
    agent_ws_url,
    _tar_context,
)

log = logging.getLogger("agent_bridge.lvmh.spawn")

@attrs.define(eq=False)
class Job:
    session_id: str
    repo: str
    branch: Optional[str]
    state: str = "queued"
    container_id: Optional[str] = None
    error: Optional[str] = None
    exit_code: Optional[int] = None
    created_at: float = attrs.field(factory=time.time)
    ended: Optional[float] = None  # monotonic, for pruning
    stopping: bool = False
    started: Optional[asyncio.Future] = None
    task: Optional[asyncio.Task] = None

    def public(self) -> dict:
        out: dict = {"repo": self.repo, "state": self.state, "containerId": self.container_id,
                     "sessionId": self.session_id, "branch": self.branch}
        if self.error is not None:
            out["error"] = self.error
        if self.exit_code is not None:
            out["exitCode"] = self.exit_code
        return out


class SpawnManager:
    def __init__(self, config: Any, store: Any, on_change: Optional[Callable[[list], None]] = None, *,
                 daemon_url: Any = None, tasks: Optional[TaskSet] = None,
                 credentials: Optional[WorkerCredentials] = None):
        self.config = config
        self.store = store
        self.credentials = credentials if credentials is not None else WorkerCredentials(store)
        self.on_change = on_change
        # the daemon's own URL for LVMH_URL (str, or a callable read at spawn time); [lvmh] agent_url wins
        self.daemon_url = daemon_url
        self.tasks = tasks or TaskSet("lvmh.spawn")
        self._own_tasks = tasks is None
        sec = config.section("lvmh") if hasattr(config, "section") else {}
        self.docker_url = docker_url_of(config)
        self.worker_image = str(sec.get("worker_image") or WORKER_IMAGE)
        self.git_image = str(sec.get("git_image") or GIT_IMAGE)
        self.models_json = sec.get("models_json") or None
        self.models_json_target = str(sec.get("models_json_target") or MODELS_JSON_TARGET)
        self.worker_context = sec.get("worker_context") or None
        self.worker_dockerfile = str(
            sec.get("worker_dockerfile") or (WORKER_DOCKERFILE if self.worker_context else SHIPPED_DOCKERFILE))
        self.agent_url = sec.get("agent_url") or None
        self.network = sec.get("network") or None
        self.clone_user = sec.get("clone_user") or None
        self.clone_timeout = _number(sec, "clone_timeout", 900.0)
        self.build_timeout = _number(sec, "build_timeout", 1800.0)
        self.max_active = int(_number(sec, "max_active_spawns", 8))
        self.retention = _number(sec, "job_retention", 600.0)
        self._jobs: dict[str, Job] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._image_lock: Optional[asyncio.Lock] = None
        self._docker: Any = None
        self._closing = False
        self._warned_loopback = False

    # --- engine ------------------------------------------------------------

    def _client(self) -> Any:
        if self._docker is None:
            import aiodocker

            try:
                self._docker = aiodocker.Docker(url=self.docker_url,
                                                timeout=aiohttp.ClientTimeout(total=120, connect=5))
            except Exception as exc:  # e.g. an ssh:// DOCKER_HOST without asyncssh, a URL without scheme
                raise SpawnError(503, f"Docker engine URL {self.docker_url} is not usable ({type(exc).__name__})")
        return self._docker

    def _unreachable(self) -> SpawnError:
        return SpawnError(503, f"Docker engine not reachable at {self.docker_url}")

    def _map(self, exc: BaseException, what: str) -> SpawnError:
        if isinstance(exc, SpawnError):
            return exc
        status = getattr(exc, "status", None)
        if isinstance(exc, TimeoutError):  # asyncio.TimeoutError is TimeoutError (an OSError) since 3.11
            return SpawnError(504, f"{what}: the Docker engine did not answer in time")
        if status == 900 or isinstance(exc, (aiohttp.ClientConnectionError, OSError)):
            return self._unreachable()
        if isinstance(status, int):
            return SpawnError(502, f"{what}: Docker engine answered {status}: {getattr(exc, 'message', '')}"[:500])
        log.error("spawn: %s failed", what, exc_info=exc)
        return SpawnError(500, f"{what}: internal error")

    async def ping(self) -> None:
        """Raise SpawnError(503) unless the engine answers."""
        try:
            async with asyncio.timeout(10):
                await self._client().version()
        except TimeoutError:
            raise self._unreachable()
        except Exception as exc:
            raise self._map(exc, "Docker engine check")

    async def close(self) -> None:
        self._closing = True
        if self._own_tasks:
            await self.tasks.close()
        else:
            for job in self._jobs.values():
                if job.task is not None and not job.task.done():
                    job.task.cancel()
        if self._docker is not None:
            await self._docker.close()
            self._docker = None

    # --- jobs --------------------------------------------------------------

    def jobs(self) -> list[dict]:
        now = time.monotonic()
        ended = [j for j in self._jobs.values() if j.ended is not None]
        for j in ended[:-50] + [j for j in ended[-50:] if now - j.ended > self.retention]:
            self._jobs.pop(j.session_id, None)
        return [j.public() for j in self._jobs.values()]

    def _set(self, job: Job, state: str, **fields: Any) -> None:
        job.state = state
        for k, v in fields.items():
            setattr(job, k, v)
        if state in TERMINAL_STATES and job.ended is None:
            job.ended = time.monotonic()
        if self.on_change is not None:
            try:
                self.on_change(self.jobs())
            except Exception:
                log.exception("spawn: on_change callback failed")

    # --- spawn -------------------------------------------------------------

    async def spawn(self, repo: Any, branch: Any = None) -> dict:
        if not valid_repo(repo):
            raise SpawnError(400, "repo must be a GitLab project path like group/project")
        if branch is not None and not valid_branch(branch):
            raise SpawnError(400, "branch is not a valid branch name")
        if sum(1 for j in self._jobs.values() if j.state in ACTIVE_STATES) >= self.max_active:
            raise SpawnError(429, f"too many spawns in progress (at most {self.max_active})")
        await self.ping()
        job = Job(session_id=str(uuid.uuid4()), repo=repo, branch=branch)
        job.started = asyncio.get_running_loop().create_future()
        job.started.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved: no warning
        self._jobs[job.session_id] = job
        self._set(job, "queued")
        log.info("spawn %s: %s%s queued", job.session_id, repo, f"@{branch}" if branch else "")
        job.task = self.tasks.spawn(self._run(job), name=f"lvmh-spawn-{job.session_id}")
        return await asyncio.shield(job.started)

    async def _run(self, job: Job) -> None:
        docker = self._client()
        token: Optional[str] = None
        try:
            mirror, vol = mirror_volume(job.repo), repo_volume(job.repo)
            lock = self._locks.setdefault(vol, asyncio.Lock())
            async with lock:
                self._set(job, "cloning")
                await docker.volumes.create({"Name": mirror, "Labels": {"lvmh.repo": job.repo, "lvmh.role": "mirror",
                                                                        "lvmh.managed": "true"}})
                await docker.volumes.create({"Name": vol, "Labels": {"lvmh.repo": job.repo, "lvmh.role": "repo",
                                                                     "lvmh.managed": "true"}})
                await self._ensure_image(docker, self.git_image, pull=True)
                await self._fetch(docker, job, mirror)
                await self._checkout(docker, job, mirror, vol)
            self._set(job, "starting")
            await self._ensure_worker_image(docker, job)
            svol = sessions_volume(job.session_id)
            await docker.volumes.create({"Name": svol, "Labels": {"lvmh.session": job.session_id,
                                                                  "lvmh.role": "sessions", "lvmh.managed": "true"}})
            token = await self.credentials.issue(job.session_id)
            container = await docker.containers.create(self._worker_config(job, vol, svol, token),
                                                       name=f"lvmh-agent-{job.session_id}")
            job.container_id = container.id
            try:
                await container.start()
            except BaseException:
                await self._remove_quietly(docker, container.id)
                job.container_id = None
                raise
        except asyncio.CancelledError:
            if token is not None:
                await self.credentials.revoke(job.session_id)
            if not job.started.done():
                job.started.set_exception(SpawnError(409, "spawn cancelled"))
            if not self._closing:
                self._set(job, "cancelled")
            raise
        except Exception as exc:
            if token is not None:
                await self.credentials.revoke(job.session_id)
            err = self._map(exc, "spawn")
            log.warning("spawn %s: %s failed: %s", job.session_id, job.repo, err.message)
            self._set(job, "failed", error=err.message)
            if not job.started.done():
                job.started.set_exception(err)
            return
        self._set(job, "running")
        log.info("spawn %s: container %s started for %s", job.session_id, container.id[:12], job.repo)
        job.started.set_result({"sessionId": job.session_id, "containerId": container.id})
        await self._watch(docker, job, container)

    async def _watch(self, docker: Any, job: Job, container: Any) -> None:
        """After the response: wait for the worker to exit, keep its exit code and log tail."""
        try:
            result = await container.wait()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not job.stopping:
                self._set(job, "failed", error=f"lost track of the container: {self._map(exc, 'wait').message}")
            return
        code = result.get("StatusCode") if isinstance(result, dict) else None
        if job.stopping:
            self._set(job, "stopped", exit_code=code)
            return
        error = None
        if code not in (0, None):
            error = f"worker exited with {code}: {await self._log_tail(container)}".strip().rstrip(":")
        self._set(job, "exited", exit_code=code, error=error)

    def _clone_url(self, repo: str) -> str:
        base = str(self.config.frontend("lvmh").gitlab_url).rstrip("/")
        return f"{base}/{repo}.git"

    async def _fetch(self, docker: Any, job: Job, mirror: str) -> None:
        """Fetch into the mirror volume, with the PAT: this container mounts nothing a worker wrote."""
        token = self.store.get_setting(PAT_KEY) if self.store is not None else None
        env = fetch_env(self._clone_url(job.repo), token)
        mounts = [{"Type": "volume", "Source": mirror, "Target": MIRROR_DIR}]
        await self._aux(docker, job, "fetch", FETCH_SCRIPT, env, mounts, secrets=(token,),
                        failed=f"git fetch of {job.repo} failed")

    async def _checkout(self, docker: Any, job: Job, mirror: str, vol: str) -> None:
        """Bring the repo volume up to date from the mirror (read-only), without any token."""
        env = checkout_env(self._clone_url(job.repo), job.branch)
        mounts = [{"Type": "volume", "Source": mirror, "Target": MIRROR_DIR, "ReadOnly": True},
                  {"Type": "volume", "Source": vol, "Target": "/workspace"}]
        await self._aux(docker, job, "checkout", CHECKOUT_SCRIPT, env, mounts, secrets=(),
                        failed=f"git checkout of {job.repo} failed")

    async def _aux(self, docker: Any, job: Job, role: str, script: str, env: list, mounts: list, *,
                   secrets: tuple, failed: str) -> None:
        """One short-lived git container: create, start, wait, remove; its log tail on failure."""
        cfg: dict = {
            "Image": self.git_image,
            "Entrypoint": ["/bin/sh", "-c"],
            "Cmd": [script],
            "Env": env,
            "WorkingDir": "/",
            "Labels": {"lvmh.role": role, "lvmh.repo": job.repo, "lvmh.spawn": job.session_id},
            "HostConfig": {"Mounts": mounts},
        }
        if self.clone_user:
            cfg["User"] = str(self.clone_user)
        if self.network:
            cfg["HostConfig"]["NetworkMode"] = str(self.network)
        container = await docker.containers.create(cfg, name=f"lvmh-{role}-{job.session_id}")
        try:
            await container.start()
            try:
                async with asyncio.timeout(self.clone_timeout):
                    result = await container.wait()
            except TimeoutError:
                raise SpawnError(504, f"{failed}: took longer than {self.clone_timeout:g}s")
            code = result.get("StatusCode") if isinstance(result, dict) else None
            if code != 0:
                tail = await self._log_tail(container, secrets=secrets)
                raise SpawnError(502, f"{failed} (exit {code}): {tail}"[:500])
        finally:
            await self._remove_quietly(docker, container.id)

    async def _log_tail(self, container: Any, secrets: tuple = ()) -> str:
        try:
            async with asyncio.timeout(10):
                lines = await container.log(stdout=True, stderr=True, tail=20)
        except Exception:
            return ""
        text = "".join(lines).strip()
        for s in secrets + (self.config.secret("lvmh"), os.environ.get("ZAI_RENAUD_API_KEY")):
            if s:
                text = text.replace(s, "***")
        text = _WORKER_TOKEN.sub("***", text)
        return text[-400:]

    async def _remove_quietly(self, docker: Any, container_id: str) -> None:
        try:
            await docker.containers.container(container_id).delete(force=True)
        except Exception as exc:
            log.warning("spawn: could not remove container %s: %s", container_id[:12], type(exc).__name__)

    async def _ensure_image(self, docker: Any, image: str, *, pull: bool) -> bool:
        """True if present (after pulling when asked); False if missing and not pulled."""
        try:
            await docker.images.inspect(image)
            return True
        except Exception as exc:
            if getattr(exc, "status", None) != 404:
                raise
        if not pull:
            return False
        log.info("spawn: pulling %s", image)
        async with asyncio.timeout(self.build_timeout):
            await docker.images.pull(image)
        return True

    def _build_context_dir(self) -> Optional[Path]:
        candidates = [Path(self.worker_context)] if self.worker_context else [PACKAGE_DIR]
        for c in candidates:
            if (c / self.worker_dockerfile).is_file():
                return c
        return None

    async def _ensure_worker_image(self, docker: Any, job: Job) -> None:
        if self._image_lock is None:
            self._image_lock = asyncio.Lock()
        async with self._image_lock:
            if await self._ensure_image(docker, self.worker_image, pull=False):
                return
            ctx = self._build_context_dir()
            if ctx is None:
                raise SpawnError(
                    503,
                    f"worker image {self.worker_image} is missing and there is no {self.worker_dockerfile} to build it "
                    f"from: build it (docker build -f {self.worker_dockerfile} -t {self.worker_image} .) or set "
                    f"[lvmh] worker_context to a directory holding {self.worker_dockerfile}",
                )
            self._set(job, "building")
            log.info("spawn: building %s from %s/%s", self.worker_image, ctx, self.worker_dockerfile)
            data = await asyncio.to_thread(_tar_context, ctx)
            try:
                async with asyncio.timeout(self.build_timeout):
                    await docker.images.build(fileobj=io.BytesIO(data), encoding="gzip", tag=self.worker_image,
                                              path_dockerfile=self.worker_dockerfile, rm=True, stream=False)
            except TimeoutError:
                raise SpawnError(504, f"building {self.worker_image} took longer than {self.build_timeout:g}s")
            except Exception as exc:
                if getattr(exc, "status", None) == 900:
                    raise
                raise SpawnError(502, f"building {self.worker_image} failed: {getattr(exc, 'message', exc)}"[:500])
            self._set(job, "starting")

    def _lvmh_url(self) -> str:
        """The plugin's ``LVMH_URL``: ``[lvmh] agent_url``, else ``daemon_url`` (a string or a callable)."""
        if self.agent_url:
            return agent_ws_url(str(self.agent_url))
        url = self.daemon_url() if callable(self.daemon_url) else self.daemon_url
        cfg = self.config
        if not url:
            url = f"{'wss' if getattr(cfg, 'tls', False) else 'ws'}://{cfg.host}:{cfg.ports.get('lvmh', 8686)}"
        url = agent_ws_url(str(url))
        u = URL(url)
        if u.host and (u.host in ("0.0.0.0", "::") or is_loopback(u.host)):
            if is_loopback(u.host) and not self._warned_loopback:
                self._warned_loopback = True
                log.warning("spawn: the daemon listens on %s, which worker containers cannot reach; "
                            "set [lvmh] agent_url or listen on another address", u.host)
            url = str(u.with_host(container_host(u.host)))
        return url

    def _worker_config(self, job: Job, vol: str, svol: str, token: str) -> dict:
        env = [
            f"LVMH_TOKEN={token}",  # the worker's own credential (lvmh_adapter/auth.py), never the user's
            f"LVMH_URL={self._lvmh_url()}",
            f"LVMH_SESSION_ID={job.session_id}",
            f"LVMH_REPO={job.repo}",
            "LVMH_AGENT=1",
        ]
        if job.branch:
            env.append(f"LVMH_BRANCH={job.branch}")
        key = os.environ.get("ZAI_RENAUD_API_KEY")
        if key:
            env.append(f"ZAI_RENAUD_API_KEY={key}")
        else:
            log.warning("spawn: ZAI_RENAUD_API_KEY is not set; the worker gets no provider key")
        mounts: list = [
            {"Type": "volume", "Source": vol, "Target": "/workspace"},
            {"Type": "volume", "Source": svol, "Target": "/pi-sessions"},
        ]
        if self.models_json:
            mounts.append({"Type": "bind", "Source": str(self.models_json), "Target": self.models_json_target,
                           "ReadOnly": True})
        host: dict = {"Mounts": mounts}
        if self.network:
            host["NetworkMode"] = str(self.network)
        if "://host.docker.internal:" in self._lvmh_url():  # Linux engines need the alias spelled out
            host["ExtraHosts"] = ["host.docker.internal:host-gateway"]
        return {
            "Image": self.worker_image,
            "Cmd": list(WORKER_CMD),
            "WorkingDir": "/workspace",
            "Env": env,
            "Labels": {"lvmh.session": job.session_id, "lvmh.repo": job.repo, "lvmh.role": "agent",
                       "lvmh.managed": "true"},
            "HostConfig": host,
        }

    # --- stop --------------------------------------------------------------

    async def stop_container(self, session_id: str) -> None:
        """Stop and remove the session's spawned container (or cancel its spawn still in flight)."""
        if not isinstance(session_id, str) or not _SESSION.fullmatch(session_id):
            raise SpawnError(400, "invalid session id")
        job = self._jobs.get(session_id)
        cancelled = False
        if job is not None and job.state in ACTIVE_STATES and job.task is not None and not job.task.done():
            job.task.cancel()
            await asyncio.wait([job.task], timeout=30)
            cancelled = True
        docker = self._client()
        try:
            found = await docker.containers.list(all=True, filters={"label": [f"lvmh.session={session_id}"]})
        except Exception as exc:
            raise self._map(exc, "listing containers")
        if not found and not cancelled:
            await self.credentials.revoke(session_id)  # whatever is left of it holds nothing any more
            raise SpawnError(404, f"no spawned container for session {session_id}")
        if job is not None:
            job.stopping = True
        # first the credential (its socket closes now): even if the engine then fails to stop the
        # container, what runs in it can no longer reach the daemon
        await self.credentials.revoke(session_id)
        for c in found:
            try:
                await c.stop(t=10)
            except Exception as exc:
                if getattr(exc, "status", None) not in (304, 404):
                    raise self._map(exc, "stopping the container")
            try:
                await c.delete(force=True)
            except Exception as exc:
                if getattr(exc, "status", None) not in (404, 409):  # 409: removal already in progress
                    raise self._map(exc, "removing the container")
            log.info("spawn %s: container %s stopped and removed", session_id, c.id[:12])
        if job is not None and job.state not in TERMINAL_STATES:
            self._set(job, "stopped")

    # --- routes ------------------------------------------------------------

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/api/spawn", self._h_spawn),
            web.get("/api/spawn/status", self._h_status),
            web.delete("/api/sessions/{id}/container", self._h_stop),
        ]

    async def _h_spawn(self, request: web.Request) -> web.Response:
        try:
            body = await read_json(request)
        except BridgeError as exc:  # not a JSON object, too deep, too large: 400/413
            return rest_error(exc)
        try:
            return web.json_response(await self.spawn(body.get("repo"), body.get("branch")))
        except SpawnError as exc:
            return exc.response()

    async def _h_status(self, request: web.Request) -> web.Response:
        """The jobs; ``[]`` without an engine (not an error: the web UI asks on every page load),
        the one-line reason in a header the spawn dialog shows."""
        try:
            await self.ping()
        except SpawnError as exc:
            return web.json_response(self.jobs(), headers={UNAVAILABLE_HEADER: exc.message})
        return web.json_response(self.jobs())

    async def _h_stop(self, request: web.Request) -> web.Response:
        try:
            await self.stop_container(request.match_info["id"])
        except SpawnError as exc:
            return exc.response()
        return web.json_response({"ok": True})
