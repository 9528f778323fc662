// A tiny lvmh daemon for the extension's tests: RFC 6455 server on node:http (no npm deps),
// bearer check on the upgrade, `welcome` with the highest persisted seq, persistence of every
// event but message_update keyed (sessionId, seq), and hooks to script prompts, aborts, drops.

import { createHash } from "node:crypto";
import { createServer } from "node:http";

const GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

function encodeFrame(opcode, payload) {
  const len = payload.length;
  let header;
  if (len < 126) {
    header = Buffer.from([0x80 | opcode, len]);
  } else if (len < 65536) {
    header = Buffer.alloc(4);
    header[0] = 0x80 | opcode;
    header[1] = 126;
    header.writeUInt16BE(len, 2);
  } else {
    header = Buffer.alloc(10);
    header[0] = 0x80 | opcode;
    header[1] = 127;
    header.writeBigUInt64BE(BigInt(len), 2);
  }
  return Buffer.concat([header, payload]);
}

class Conn {
  constructor(daemon, socket, req) {
    this.daemon = daemon;
    this.socket = socket;
    this.headers = req.headers;
    this.buf = Buffer.alloc(0);
    this.fragments = [];
    this.frames = []; // parsed JSON frames received on this connection
    this.sessionId = null;
    this.closed = false;
    socket.on("data", (chunk) => this._onData(chunk));
    socket.on("close", () => {
      this.closed = true;
    });
    socket.on("error", () => {});
  }

  _onData(chunk) {
    this.buf = Buffer.concat([this.buf, chunk]);
    for (;;) {
      if (this.buf.length < 2) return;
      const b0 = this.buf[0];
      const b1 = this.buf[1];
      let len = b1 & 0x7f;
      let off = 2;
      if (len === 126) {
        if (this.buf.length < 4) return;
        len = this.buf.readUInt16BE(2);
        off = 4;
      } else if (len === 127) {
        if (this.buf.length < 10) return;
        len = Number(this.buf.readBigUInt64BE(2));
        off = 10;
      }
      const masked = (b1 & 0x80) !== 0;
      const maskLen = masked ? 4 : 0;
      if (this.buf.length < off + maskLen + len) return;
      const mask = masked ? this.buf.subarray(off, off + 4) : null;
      const payload = Buffer.from(this.buf.subarray(off + maskLen, off + maskLen + len));
      if (mask) for (let i = 0; i < payload.length; i++) payload[i] ^= mask[i & 3];
      this.buf = this.buf.subarray(off + maskLen + len);
      const fin = (b0 & 0x80) !== 0;
      const opcode = b0 & 0x0f;
      if (opcode === 0x8) {
        this.closeFrame(1000);
        this.socket.end();
        return;
      }
      if (opcode === 0x9) {
        this.socket.write(encodeFrame(0xa, payload));
        continue;
      }
      if (opcode === 0xa) continue;
      if (opcode === 0x1 || opcode === 0x2 || opcode === 0x0) {
        this.fragments.push(payload);
        if (!fin) continue;
        const text = Buffer.concat(this.fragments).toString("utf8");
        this.fragments = [];
        let msg;
        try {
          msg = JSON.parse(text);
        } catch {
          msg = { unparsable: text };
        }
        this.frames.push(msg);
        this.daemon._onFrame(this, msg);
      }
    }
  }

  send(obj) {
    if (this.closed) return;
    const text = typeof obj === "string" ? obj : JSON.stringify(obj);
    this.socket.write(encodeFrame(0x1, Buffer.from(text, "utf8")));
  }

  closeFrame(code = 1000) {
    if (this.closed) return;
    const p = Buffer.alloc(2);
    p.writeUInt16BE(code, 0);
    try {
      this.socket.write(encodeFrame(0x8, p));
    } catch {
      /* ignore */
    }
  }

  /** Abrupt drop (no close frame). */
  kill() {
    this.socket.destroy();
    this.closed = true;
  }
}

export class FakeDaemon {
  constructor({ token = "test-token", path = "/agent/ws", autoWelcome = true } = {}) {
    this.token = token;
    this.path = path;
    this.autoWelcome = autoWelcome;
    this.conns = [];
    this.frames = []; // every frame from every connection, in arrival order
    this.persisted = new Map(); // sessionId -> Map(seq -> frame)
    this.rejected = []; // {authorization, url}
    this.lastSeqOverride = null; // (sessionId) => number | undefined
    this.onHello = null; // (conn, frame) => void, after welcome
    this.onEvent = null; // (conn, frame) => void
    this.rejectAll = false;
    this._waiters = [];
    this.server = createServer((req, res) => {
      res.writeHead(404).end();
    });
    this.server.on("upgrade", (req, socket) => this._onUpgrade(req, socket));
  }

  async listen(port = 0) {
    await new Promise((resolve, reject) => {
      this.server.once("error", reject);
      this.server.listen(port, "127.0.0.1", () => resolve());
    });
    this.server.unref(); // a failing test must not keep the runner alive
    this.port = this.server.address().port;
    this.url = `ws://127.0.0.1:${this.port}${this.path}`;
    return this;
  }

  _onUpgrade(req, socket) {
    const auth = req.headers.authorization;
    if (this.rejectAll || req.url !== this.path || auth !== `Bearer ${this.token}`) {
      this.rejected.push({ authorization: auth, url: req.url });
      socket.end("HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
      return;
    }
    const accept = createHash("sha1").update(req.headers["sec-websocket-key"] + GUID).digest("base64");
    socket.write(
      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
        `Sec-WebSocket-Accept: ${accept}\r\n\r\n`,
    );
    socket.setNoDelay(true);
    socket.unref();
    const conn = new Conn(this, socket, req);
    this.conns.push(conn);
    this._notify();
  }

  lastSeq(sessionId) {
    if (this.lastSeqOverride) {
      const v = this.lastSeqOverride(sessionId);
      if (v !== undefined) return v;
    }
    const rows = this.persisted.get(sessionId);
    if (!rows || rows.size === 0) return 0;
    return Math.max(...rows.keys());
  }

  _onFrame(conn, msg) {
    this.frames.push(msg);
    if (msg.type === "hello") {
      conn.sessionId = msg.sessionId;
      if (this.autoWelcome) {
        conn.send({ v: 1, type: "welcome", sessionId: msg.sessionId, seq: 0, ts: Date.now(), lastSeq: this.lastSeq(msg.sessionId) });
      }
      if (this.onHello) this.onHello(conn, msg);
    } else {
      if (msg.type !== "message_update" && msg.sessionId != null && Number.isInteger(msg.seq)) {
        if (!this.persisted.has(msg.sessionId)) this.persisted.set(msg.sessionId, new Map());
        const rows = this.persisted.get(msg.sessionId);
        if (!rows.has(msg.seq)) rows.set(msg.seq, msg);
      }
      if (this.onEvent) this.onEvent(conn, msg);
    }
    this._notify();
  }

  /** Persisted events of a session, seq ascending. */
  events(sessionId) {
    const rows = this.persisted.get(sessionId);
    return rows ? [...rows.values()].sort((a, b) => a.seq - b.seq) : [];
  }

  get lastConn() {
    return this.conns[this.conns.length - 1];
  }

  get openConns() {
    return this.conns.filter((c) => !c.closed);
  }

  _notify() {
    const waiters = this._waiters;
    this._waiters = [];
    for (const w of waiters) {
      if (!w.check()) this._waiters.push(w);
    }
  }

  /** Resolve when pred() is truthy (checked on every frame/connection), reject after ms. */
  waitFor(pred, ms = 5000, what = "condition") {
    return new Promise((resolve, reject) => {
      const w = {
        check: () => {
          let v;
          try {
            v = pred();
          } catch (err) {
            clearTimeout(t);
            reject(err);
            return true;
          }
          if (v) {
            clearTimeout(t);
            resolve(v);
            return true;
          }
          return false;
        },
      };
      const t = setTimeout(() => {
        this._waiters = this._waiters.filter((x) => x !== w);
        reject(new Error(`timed out after ${ms} ms waiting for ${what}; frames: ${JSON.stringify(this.frames.map((f) => [f.seq, f.type]))}`));
      }, ms);
      if (!w.check()) this._waiters.push(w);
    });
  }

  /** Drop every connection abruptly. */
  killAll() {
    for (const c of this.conns) c.kill();
  }

  async close() {
    this.killAll();
    await new Promise((resolve) => this.server.close(() => resolve()));
  }
}

export async function startFakeDaemon(opts = {}) {
  const d = new FakeDaemon(opts);
  await d.listen(opts.port ?? 0);
  return d;
}
