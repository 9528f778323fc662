// One lvmh session's connection to the daemon (the lvmh protocol "Transport 1").
//
// - seq: assigned here to every daemon-bound event, from 1, per session. If the daemon already
//   knows the session (first `welcome` has lastSeq > 0: a resumed session, a pi restart, an
//   extension reload), the not-yet-sent events are renumbered to follow lastSeq, so nothing
//   collides with rows the daemon already has.
// - Every event except `message_update` goes into the EventBuffer (replay buffer and bounded send
//   queue in one); `message_update` deltas are sent only when the connection is ready and idle,
//   otherwise dropped (the daemon never persists them; `message_end` carries the full text).
// - Writes never wait on the network: ws.send() queues, and when the socket's bufferedAmount is
//   above a high-water mark the pump backs off on a timer. A pump run writes at most
//   PUMP_BATCH frames before yielding to the event loop.
// - Reconnects forever with exponential backoff + jitter (capped), hello -> welcome -> replay of
//   seq > welcome.lastSeq -> live events. Timers are unref'd: the link never keeps pi alive.
// - Every callback is guarded: errors are logged, never thrown into pi.

import { Backoff } from "./backoff.mjs";
import { EventBuffer, DEFAULT_CAP } from "./event-buffer.mjs";
import { payloadJson, safeStringify } from "./mapping.mjs";

const OPEN = 1;
const PUMP_BATCH = 256;

/** The URL for the log: no userinfo, no query (a token could hide there). */
export function redactUrl(url) {
  try {
    const u = new URL(url);
    const q = u.search ? "?…" : "";
    return `${u.protocol}//${u.host}${u.pathname}${q}`;
  } catch {
    return "<bad url>";
  }
}

export function buildFrame(sessionId, seq, ts, type, json) {
  const pre = `{"v":1,"sessionId":${JSON.stringify(sessionId)},"seq":${seq},"ts":${ts},"type":${JSON.stringify(type)}`;
  return json.length > 2 ? pre + "," + json.slice(1) : pre + "}";
}

function dataText(data) {
  if (typeof data === "string") return data;
  if (data instanceof ArrayBuffer) return Buffer.from(data).toString("utf8");
  if (ArrayBuffer.isView(data)) return Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString("utf8");
  if (Array.isArray(data)) return Buffer.concat(data).toString("utf8");
  return null;
}

export class SessionLink {
  constructor({
    sessionId,
    url,
    token = "",
    log,
    resolveWebSocket,
    session = null,
    backoff = null,
    cap = DEFAULT_CAP,
    handshakeTimeoutMs = 10_000,
    highWaterBytes = 1024 * 1024,
    drainMs = 30_000,
    now = Date.now,
    onFinished = null,
  }) {
    this.sessionId = sessionId;
    this.url = url;
    this.safeUrl = redactUrl(url);
    this.token = token;
    this.log = log;
    this.resolveWebSocket = resolveWebSocket;
    this.session = session;
    this.backoff = backoff || new Backoff();
    this.buffer = new EventBuffer({ cap });
    this.handshakeTimeoutMs = handshakeTimeoutMs;
    this.highWaterBytes = highWaterBytes;
    this.drainMs = drainMs;
    this.now = now;
    this.onFinished = onFinished;

    this.state = "new"; // new | connecting | handshake | ready | waiting | closed
    this.nextSeq = 1;
    this.welcomed = false;
    this.ws = null;
    this.handlers = { onPrompt: null, onAbort: null };
    this.closing = null; // {abandonWhenDown, drainTimer}
    this._timers = { reconnect: null, handshake: null, pump: null, flush: null };
    this._pumpQueued = false;
    this._failures = 0;
    this._closeWaiters = [];
    this._parkTimer = null;
    this.stats = { connects: 0, welcomes: 0, deltasDropped: 0, framesSent: 0 };
  }

  // ---------------------------------------------------------------- public API

  setHandlers(handlers) {
    this.handlers = { ...this.handlers, ...handlers };
  }

  /** Replace the session snapshot sent in `hello` (and by the caller in `session_info`). */
  setSession(session) {
    this.session = session;
  }

  start() {
    if (this.state !== "new") return;
    this._connect();
  }

  get ready() {
    return this.state === "ready";
  }

  /**
   * Queue a daemon-bound event; returns its seq (or null once the link is closed).
   * ephemeral=true: not buffered, sent only if the link is ready and has no backlog.
   */
  emit(type, payload = {}, { ephemeral = false } = {}) {
    if (this.state === "closed") return null;
    const seq = this.nextSeq++;
    const ts = this.now();
    const json = payloadJson(payload);
    if (ephemeral) {
      const ws = this.ws;
      if (
        this.state === "ready" && ws && ws.readyState === OPEN &&
        this.buffer.unsentCount === 0 && ws.bufferedAmount < this.highWaterBytes
      ) {
        this._send(ws, buildFrame(this.sessionId, seq, ts, type, json));
      } else {
        this.stats.deltasDropped += 1;
      }
      return seq;
    }
    this.buffer.push({ seq, ts, type, json });
    if (this.state === "ready") this._pump();
    return seq;
  }

  /**
   * Graceful end of this session: queue `bye`, deliver what is buffered, close.
   * waitMs: how long the returned promise waits for delivery (it never rejects).
   * abandon: true when the process is about to exit: if the daemon cannot be reached now,
   * give up at once (pi must not hang on quit when the daemon is down), and in any case
   * stop after waitMs. Otherwise the link keeps draining in the background for drainMs.
   */
  close({ waitMs = 0, abandon = false } = {}) {
    if (this.state === "closed") return Promise.resolve();
    if (!this.closing) {
      this.emit("bye", { reason: "shutdown" });
      this.closing = { abandonWhenDown: abandon, drainTimer: null };
      this.closing.drainTimer = this._timer(this.drainMs, () => this._finish("drain timeout"));
    } else if (abandon) {
      this.closing.abandonWhenDown = true;
    }
    if (abandon && (this.state === "waiting" || this.state === "new")) {
      this._finish("daemon not connected at exit");
      return Promise.resolve();
    }
    if (this.state === "ready" && this.buffer.unsentCount === 0) this._flushAndClose();
    if (this.state === "closed") return Promise.resolve();
    return new Promise((resolve) => {
      let t = null;
      const done = () => {
        if (t) clearTimeout(t);
        resolve();
      };
      this._closeWaiters.push(done);
      // Not unref'd: pi awaits this promise in session_shutdown, so it must settle even when
      // nothing else keeps the event loop alive. It is bounded by waitMs.
      t = setTimeout(() => {
        this._closeWaiters = this._closeWaiters.filter((w) => w !== done);
        if (abandon) this._guard(() => this._finish("exit before delivery finished"));
        resolve();
      }, Math.max(0, waitMs));
    });
  }

  /**
   * Keep the link (connected, no `bye`) for a session that is expected back soon (pi's
   * `/reload` ends the runtime and starts the same session again); close it after ms unless
   * reopen() is called first.
   */
  park(ms) {
    if (this.state === "closed") return;
    clearTimeout(this._parkTimer);
    this.setHandlers({ onPrompt: null, onAbort: null });
    this._parkTimer = this._timer(ms, () => {
      this._parkTimer = null;
      this.close();
    });
  }

  /** Undo park() or close() if the link has not finished yet (same session started again). */
  reopen() {
    clearTimeout(this._parkTimer);
    this._parkTimer = null;
    if (this.state === "closed" || !this.closing) return this.state !== "closed";
    clearTimeout(this.closing.drainTimer);
    clearTimeout(this._timers.flush);
    this._timers.flush = null;
    this.closing = null;
    return true;
  }

  // ---------------------------------------------------------------- internals

  _guard(fn) {
    try {
      fn();
    } catch (err) {
      try {
        this.log.error(`lvmh session ${this.sessionId}: internal error`, err);
      } catch {
        /* never throw */
      }
    }
  }

  _timer(ms, fn) {
    const t = setTimeout(() => this._guard(fn), Math.max(0, ms));
    if (t && typeof t.unref === "function") t.unref();
    return t;
  }

  _clearTimers() {
    for (const k of Object.keys(this._timers)) {
      if (this._timers[k]) clearTimeout(this._timers[k]);
      this._timers[k] = null;
    }
  }

  _send(ws, text) {
    ws.send(text);
    this.stats.framesSent += 1;
  }

  async _connect() {
    if (this.state === "closed") return;
    this.state = "connecting";
    let WS = null;
    try {
      WS = await this.resolveWebSocket();
    } catch (err) {
      this.log.error("lvmh: cannot load a WebSocket implementation", err);
    }
    if (this.state === "closed") return;
    if (!WS) {
      this.log.error("lvmh: no WebSocket implementation (need node >= 22, or the `ws` package); plugin disabled");
      this._finish("no WebSocket implementation");
      return;
    }
    let ws;
    try {
      const options = this.token ? { headers: { Authorization: `Bearer ${this.token}` } } : {};
      ws = new WS(this.url, options);
    } catch (err) {
      this._failures += 1;
      this.log.error(`lvmh: cannot open ${this.safeUrl}`, err);
      this._scheduleReconnect();
      return;
    }
    this.stats.connects += 1;
    this.ws = ws;
    this._timers.handshake = this._timer(this.handshakeTimeoutMs, () => {
      if (this.ws === ws && this.state !== "ready") this._onDown(ws, "handshake timeout");
    });
    ws.onopen = () => this._guard(() => this._onOpen(ws));
    ws.onmessage = (ev) => this._guard(() => this._onMessage(ws, ev && ev.data));
    // Node 22's built-in WebSocket (undici) fires only `error`, no `close`, when the upgrade
    // fails (refused, 401, ...): both lead to the same idempotent _onDown.
    ws.onerror = (ev) =>
      this._guard(() => this._onDown(ws, `error${ev && ev.message ? ": " + ev.message : ""}`));
    ws.onclose = (ev) => this._guard(() => this._onDown(ws, `closed (${ev ? ev.code : "?"})`));
  }

  _onOpen(ws) {
    if (ws !== this.ws || this.state === "closed") return;
    this.state = "handshake";
    const hello = {
      v: 1,
      type: "hello",
      sessionId: this.sessionId,
      seq: 0,
      ts: this.now(),
      session: this.session,
    };
    this._send(ws, safeStringify(hello));
  }

  _onMessage(ws, data) {
    if (ws !== this.ws || this.state === "closed") return;
    const text = dataText(data);
    if (text == null) {
      this.log.warn("lvmh: ignoring a non-text frame from the daemon");
      return;
    }
    let msg;
    try {
      msg = JSON.parse(text);
    } catch {
      this.log.warn(`lvmh: ignoring a frame that is not JSON (${text.length} chars)`);
      return;
    }
    if (!msg || typeof msg !== "object" || Array.isArray(msg)) return;
    if (msg.sessionId != null && msg.sessionId !== this.sessionId) {
      this.log.warn(`lvmh: ignoring ${msg.type} for another session (${msg.sessionId})`);
      return;
    }
    switch (msg.type) {
      case "welcome":
        this._onWelcome(ws, msg);
        break;
      case "prompt":
        if (this.closing) {
          this.log.warn(`lvmh: prompt ${msg.promptId ?? "?"} for a session that is shutting down, ignored`);
        } else if (this.handlers.onPrompt) {
          this.handlers.onPrompt(msg);
        }
        break;
      case "abort":
        if (!this.closing && this.handlers.onAbort) this.handlers.onAbort(msg);
        break;
      case "error": // agent-bridge's daemon answers a frame it refused (lvmh_adapter/errors.py)
        this.log.warn(
          `lvmh session ${this.sessionId}: daemon error ${safeStringify(msg.code ?? "?")}: ` +
            `${safeStringify(msg.error ?? msg.message ?? "")}` + (msg.refSeq != null ? ` (seq ${msg.refSeq})` : ""),
        );
        break;
      default:
        this.log.debug(`lvmh: ignoring unknown frame type ${safeStringify(msg.type)}`);
    }
  }

  _onWelcome(ws, msg) {
    const lastSeq = Number.isSafeInteger(msg.lastSeq) && msg.lastSeq >= 0 ? msg.lastSeq : 0;
    clearTimeout(this._timers.handshake);
    this._timers.handshake = null;
    if (!this.welcomed) {
      this.welcomed = true;
      if (lastSeq > 0) {
        // Nothing of this link was ever sent: our numbers are provisional. Follow the daemon's.
        this.buffer.renumber(lastSeq);
        this.nextSeq += lastSeq;
        this.log.info(`lvmh session ${this.sessionId}: daemon has seq <= ${lastSeq}, continuing after it`);
      }
    } else if (lastSeq >= this.nextSeq) {
      this.log.warn(
        `lvmh session ${this.sessionId}: daemon lastSeq ${lastSeq} is ahead of this plugin (${this.nextSeq - 1})`,
      );
    }
    this.buffer.acknowledge(lastSeq);
    const wasDown = this._failures > 0 || this.stats.welcomes > 0;
    this.stats.welcomes += 1;
    this._failures = 0;
    this.backoff.reset();
    this.state = "ready";
    this.log.info(
      `lvmh session ${this.sessionId}: ${wasDown ? "reconnected" : "connected"} to ${this.safeUrl}, ` +
        `lastSeq=${lastSeq}, replaying ${this.buffer.unsentCount}`,
    );
    this._pump();
  }

  _onDown(ws, why) {
    if (ws !== this.ws) return;
    this.ws = null;
    ws.onopen = ws.onmessage = ws.onerror = ws.onclose = null;
    try {
      ws.close();
    } catch {
      /* already closed */
    }
    clearTimeout(this._timers.handshake);
    clearTimeout(this._timers.pump);
    clearTimeout(this._timers.flush);
    this._timers.handshake = this._timers.pump = this._timers.flush = null;
    if (this.state === "closed") return;
    const wasReady = this.state === "ready";
    this.buffer.rewind();
    if (this.closing && this.closing.abandonWhenDown) {
      this._finish(`daemon unreachable at exit (${why})`);
      return;
    }
    if (wasReady) {
      this.log.warn(`lvmh session ${this.sessionId}: disconnected (${why}), will reconnect`);
    } else {
      this._failures += 1;
      // Quiet when the daemon stays down: the first failure, then every 20th.
      if (this._failures === 1 || this._failures % 20 === 0) {
        this.log.warn(
          `lvmh session ${this.sessionId}: cannot reach ${this.safeUrl} (${why}); attempt ${this._failures}, ` +
            `${this.buffer.size} events buffered`,
        );
      }
    }
    this._scheduleReconnect();
  }

  _scheduleReconnect() {
    if (this.state === "closed") return;
    this.state = "waiting";
    const delay = this.backoff.next();
    this._timers.reconnect = this._timer(delay, () => {
      this._timers.reconnect = null;
      this._connect();
    });
  }

  _pump() {
    const ws = this.ws;
    if (this.state !== "ready" || !ws) return;
    if (this.buffer.hasOverflow) this._queueOverflowNotice();
    let sent = 0;
    while (ws.readyState === OPEN) {
      const entry = this.buffer.peek();
      if (!entry) break;
      if (ws.bufferedAmount >= this.highWaterBytes) {
        if (!this._timers.pump) {
          this._timers.pump = this._timer(25, () => {
            this._timers.pump = null;
            this._pump();
          });
        }
        return;
      }
      if (sent >= PUMP_BATCH) {
        if (!this._pumpQueued) {
          this._pumpQueued = true;
          const t = setImmediate(() => {
            this._pumpQueued = false;
            this._guard(() => this._pump());
          });
          if (t && typeof t.unref === "function") t.unref();
        }
        return;
      }
      this._send(ws, buildFrame(this.sessionId, entry.seq, entry.ts, entry.type, entry.json));
      this.buffer.markSent();
      sent += 1;
    }
    if (this.closing && this.buffer.unsentCount === 0) this._flushAndClose();
  }

  /**
   * `buffer_overflow {dropped, fromSeq, toSeq}`: appended at the tail with a fresh seq, so seqs
   * stay increasing on the wire and the daemon's lastSeq keeps meaning "all before it was sent".
   * Room is made first, so queueing the notice itself drops nothing unreported.
   */
  _queueOverflowNotice() {
    this.buffer.makeRoom();
    const overflow = this.buffer.takeOverflow();
    if (!overflow) return;
    this.log.warn(
      `lvmh session ${this.sessionId}: buffer full, ${overflow.dropped} events dropped ` +
        `(seq ${overflow.fromSeq}..${overflow.toSeq})`,
    );
    const seq = this.nextSeq++;
    this.buffer.push({ seq, ts: this.now(), type: "buffer_overflow", json: payloadJson(overflow) });
  }

  /** Everything is written: wait for the socket to drain (bounded), then close with 1000. */
  _flushAndClose() {
    const ws = this.ws;
    if (!ws || this._timers.flush) return;
    const started = this.now();
    const check = () => {
      this._timers.flush = null;
      if (this.ws !== ws || !this.closing) return;
      if (ws.bufferedAmount > 0 && this.now() - started < 2000) {
        this._timers.flush = this._timer(10, check);
        return;
      }
      this._finish("bye sent");
    };
    this._timers.flush = this._timer(0, check);
  }

  _finish(why) {
    if (this.state === "closed") return;
    const wasClosing = !!this.closing;
    this.state = "closed";
    this._clearTimers();
    clearTimeout(this._parkTimer);
    if (this.closing) clearTimeout(this.closing.drainTimer);
    const ws = this.ws;
    this.ws = null;
    if (ws) {
      ws.onopen = ws.onmessage = ws.onerror = null;
      ws.onclose = null;
      try {
        ws.close(1000, "bye");
      } catch {
        /* ignore */
      }
    }
    const lost = this.buffer.unsentCount;
    if (lost > 0) {
      this.log.warn(`lvmh session ${this.sessionId}: closed (${why}); ${lost} events not delivered`);
    } else {
      this.log.info(`lvmh session ${this.sessionId}: closed (${why})`);
    }
    const waiters = this._closeWaiters;
    this._closeWaiters = [];
    for (const w of waiters) w();
    if (this.onFinished) this.onFinished(this, wasClosing);
  }
}
