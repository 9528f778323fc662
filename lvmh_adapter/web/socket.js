// Browser WebSocket (/ws?token=...) with reconnect: exponential backoff with jitter, capped.
// The owner re-subscribes and refetches in onOpen; frames arrive in onFrame.
// `probe` (optional) is awaited before each attempt: a plain authenticated request that tells
// whether the daemon is up and takes the token. Only then is the socket opened, so the browser
// never logs a failed upgrade, whose URL carries the token, to the console.

export function backoffDelay(attempt, base = 500, cap = 15000, random = Math.random) {
  const exp = Math.min(cap, base * 2 ** Math.min(attempt, 16));
  return Math.round(exp / 2 + random() * (exp / 2));
}

export class LiveSocket {
  constructor({ url, onOpen, onFrame, onState, probe }) {
    this.url = url; // () => string
    this.probe = probe || null; // async () => boolean
    this.onOpen = onOpen || (() => {});
    this.onFrame = onFrame || (() => {});
    this.onState = onState || (() => {});
    this.ws = null;
    this.attempt = 0;
    this.timer = null;
    this.stopped = true;
    this.state = "idle"; // idle | connecting | open | waiting
    this.retryAt = 0;
    this.failures = 0; // consecutive closes without ever opening
  }

  start() {
    this.stopped = false;
    if (!this.ws && !this.timer) this.connect();
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = null;
    if (this.ws) {
      const ws = this.ws;
      this.ws = null;
      ws.onclose = null;
      try {
        ws.close(1000, "bye");
      } catch {}
    }
    this.setState("idle");
  }

  /** Reconnect now (e.g. the user clicked "retry", or the page became visible). */
  retryNow() {
    if (this.stopped || this.state === "open" || this.state === "connecting") return;
    clearTimeout(this.timer);
    this.timer = null;
    this.connect();
  }

  setState(state) {
    this.state = state;
    this.onState(state, this);
  }

  async connect() {
    this.timer = null;
    if (this.stopped) return;
    this.setState("connecting");
    if (this.probe) {
      let ok = false;
      try {
        ok = await this.probe();
      } catch {
        ok = false;
      }
      if (this.stopped || this.ws) return;
      if (!ok) {
        this.failures += 1;
        this.scheduleRetry();
        return;
      }
    }
    let ws;
    try {
      ws = new WebSocket(this.url());
    } catch {
      this.scheduleRetry();
      return;
    }
    this.ws = ws;
    let opened = false;
    ws.onopen = () => {
      opened = true;
      this.attempt = 0;
      this.failures = 0;
      this.setState("open");
      try {
        this.onOpen(this);
      } catch (err) {
        console.error(err);
      }
    };
    ws.onmessage = (msg) => {
      if (typeof msg.data !== "string") return;
      let frame;
      try {
        frame = JSON.parse(msg.data);
      } catch {
        return;
      }
      if (frame && typeof frame === "object") {
        try {
          this.onFrame(frame);
        } catch (err) {
          console.error(err);
        }
      }
    };
    ws.onclose = () => {
      if (this.ws !== ws) return;
      this.ws = null;
      if (!opened) this.failures += 1;
      this.scheduleRetry();
    };
    ws.onerror = () => {};
  }

  scheduleRetry() {
    if (this.stopped) return;
    const delay = backoffDelay(this.attempt);
    this.attempt += 1;
    this.retryAt = Date.now() + delay;
    this.timer = setTimeout(() => this.connect(), delay);
    this.setState("waiting");
  }

  send(frame) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) {
      this.ws.send(JSON.stringify(frame));
      return true;
    }
    return false;
  }
}
