// The plugin's outbox: every persisted-kind event of one session, in seq order, capped.
//
// It is both the replay buffer and the bounded send queue:
// - push() appends an event (O(1)); past `cap` entries the oldest is evicted;
// - a send cursor walks the entries that were not yet written on the current connection;
// - acknowledge(lastSeq) (from the daemon's `welcome`) forgets what the daemon persisted and
//   rewinds the cursor, so the next connection replays exactly the events with seq > lastSeq.
//
// Entries evicted before they were ever written to a socket are lost for good; they are counted
// and reported once through takeOverflow() (the plugin turns that into a `buffer_overflow`
// event). Entries evicted after being written were delivered on a connection that was open at
// the time; the buffer keeps the most recent `cap` of them in case that connection died before
// the daemon persisted them.

export const DEFAULT_CAP = 10_000;

export class EventBuffer {
  constructor({ cap = DEFAULT_CAP } = {}) {
    if (!(cap >= 1)) throw new RangeError(`bad buffer cap ${cap}`);
    this.cap = cap;
    this._q = [];
    this._head = 0; // index of the oldest live entry in _q
    this._cursor = 0; // index in _q of the next entry to write on the current connection
    this._overflow = null; // {dropped, fromSeq, toSeq} of never-sent evicted entries
    this.evictedTotal = 0;
  }

  get size() {
    return this._q.length - this._head;
  }

  /** Entries not yet written on the current connection. */
  get unsentCount() {
    return this._q.length - this._cursor;
  }

  /** Seq of the newest entry, or 0. */
  get lastSeq() {
    return this.size ? this._q[this._q.length - 1].seq : 0;
  }

  /** Seq of the oldest entry, or 0. */
  get firstSeq() {
    return this.size ? this._q[this._head].seq : 0;
  }

  /**
   * Append an entry `{seq, ...}` (seq must grow). Returns the evicted entry, if any.
   */
  push(entry) {
    if (this.size && entry.seq <= this.lastSeq) {
      throw new RangeError(`seq ${entry.seq} is not after ${this.lastSeq}`);
    }
    entry.sent = false;
    this._q.push(entry);
    let evicted = null;
    if (this.size > this.cap) evicted = this._evictOldest();
    return evicted;
  }

  /** Evict the oldest entry if the buffer is full, so that the next push evicts nothing. */
  makeRoom() {
    return this.size >= this.cap ? this._evictOldest() : null;
  }

  _evictOldest() {
    const e = this._q[this._head];
    this._q[this._head] = undefined;
    this._head += 1;
    if (this._cursor < this._head) this._cursor = this._head;
    this.evictedTotal += 1;
    if (!e.sent) {
      const o = this._overflow;
      if (o) {
        o.dropped += 1;
        o.toSeq = e.seq;
      } else {
        this._overflow = { dropped: 1, fromSeq: e.seq, toSeq: e.seq };
      }
    }
    this._compact();
    return e;
  }

  _compact() {
    if (this._head > 1024 && this._head * 2 > this._q.length) {
      this._q = this._q.slice(this._head);
      this._cursor -= this._head;
      this._head = 0;
    }
  }

  /** The next entry to write on the current connection, or null. */
  peek() {
    return this._cursor < this._q.length ? this._q[this._cursor] : null;
  }

  /** Mark the entry returned by peek() as written. */
  markSent() {
    const e = this._q[this._cursor];
    if (e) {
      e.sent = true;
      this._cursor += 1;
    }
  }

  /**
   * The daemon persisted everything up to lastSeq: forget it, and rewind the cursor so that
   * every remaining entry is (re)sent on this connection.
   */
  acknowledge(lastSeq) {
    while (this._head < this._q.length && this._q[this._head].seq <= lastSeq) {
      this._q[this._head] = undefined;
      this._head += 1;
    }
    this._cursor = this._head;
    this._compact();
    if (this._overflow && this._overflow.toSeq <= lastSeq) {
      // Everything we lost is something the daemon has anyway (cannot happen for never-sent
      // entries unless another process sent them; harmless).
      this._overflow = null;
    } else if (this._overflow && this._overflow.fromSeq <= lastSeq) {
      this._overflow.fromSeq = lastSeq + 1;
    }
  }

  /** Nothing written yet on the new connection (before its welcome). */
  rewind() {
    this._cursor = this._head;
  }

  /** Add `offset` to every entry's seq (only valid while nothing was ever sent). */
  renumber(offset) {
    for (let i = this._head; i < this._q.length; i++) this._q[i].seq += offset;
    if (this._overflow) {
      this._overflow.fromSeq += offset;
      this._overflow.toSeq += offset;
    }
  }

  get hasOverflow() {
    return this._overflow !== null;
  }

  /** Returns and clears the never-sent eviction stats: {dropped, fromSeq, toSeq} or null. */
  takeOverflow() {
    const o = this._overflow;
    this._overflow = null;
    return o;
  }

  /** Snapshot of the live entries (tests, debugging). */
  entries() {
    return this._q.slice(this._head);
  }
}
