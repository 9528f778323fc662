// Exponential backoff with jitter, capped (lvmh spec: "exponential backoff + jitter, capped 30s, forever").
//
// Attempt n (0-based) has a ceiling of min(maxMs, baseMs * factor^n); the delay is drawn
// uniformly from [ceiling/2, ceiling] ("equal jitter"), so reconnecting plugins spread out
// but never wait longer than maxMs, and never retry in a tight loop.

export class Backoff {
  constructor({ baseMs = 500, maxMs = 30_000, factor = 2, random = Math.random } = {}) {
    if (!(baseMs > 0) || !(maxMs >= baseMs) || !(factor >= 1)) {
      throw new RangeError(`bad backoff settings: base=${baseMs} max=${maxMs} factor=${factor}`);
    }
    this.baseMs = baseMs;
    this.maxMs = maxMs;
    this.factor = factor;
    this.random = random;
    this.attempt = 0;
  }

  /** The ceiling for the current attempt, without jitter. */
  ceiling() {
    // Math.pow overflows to Infinity for big attempts, which min() then caps.
    return Math.min(this.maxMs, this.baseMs * Math.pow(this.factor, this.attempt));
  }

  /** Delay in ms before the next attempt; advances the attempt counter. */
  next() {
    const ceiling = this.ceiling();
    this.attempt += 1;
    const r = Math.min(1, Math.max(0, Number(this.random()) || 0));
    return Math.round(ceiling / 2 + (ceiling / 2) * r);
  }

  /** Call after a successful handshake. */
  reset() {
    this.attempt = 0;
  }
}
