"""What a nemesis run says: its operations, the faults injected per kind, each anomaly with the
minimal excerpt of the history that shows it (the frames and requests it names). Pure."""

from __future__ import annotations

import json
from collections import Counter
from typing import Iterable

from .checker import Anomaly
from .history import History, Received

# frame fields worth a line in an excerpt, by surface
_SHOW = {"loomi": ("run_id", "task_id"), "pheby": ("conversation_id", "run_id", "message_id", "approval_id"),
         "lvmh": ("sessionId", "after")}  # fmt: skip


def frame_line(i: int, r: Received) -> str:
    f = r.frame
    p = f.get("payload") if isinstance(f.get("payload"), dict) else {}
    bits = [f"#{i} t={r.t:.3f} {r.client}/conn{r.conn}@{r.node}"]
    if "seq" in f:
        bits.append(f"seq={f['seq']}")
    bits.append(str(f.get("type")))
    if f.get("replayed"):
        bits.append("replayed")
    for key in _SHOW.get(r.surface, ()):
        if f.get(key) is not None:
            bits.append(f"{key}={str(f[key])[:12]}")
    for key in ("text", "status", "truncated", "code", "approval_id", "choice"):
        value = p.get(key, f.get(key) if r.surface == "pheby" else None)
        if value is not None:
            bits.append(f"{key}={_short(value)}")
    if f.get("type") == "events":
        bits.append("events=" + ",".join(f"{e.get('seq')}:{e.get('type')}" for e in f.get("events", [])[:6]))
    return " ".join(bits)


def _short(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return repr(text) if len(text) <= 40 else f"{text[:18]!r}..({len(text)})"


def excerpt(h: History, a: Anomaly, context: int = 2) -> list[str]:
    """The frames the anomaly names, with ``context`` frames of the same connection either side, and its ops."""
    lines = []
    shown: set = set()
    for i in a.frames:
        r = h.frames[i]
        same = [j for j, x in enumerate(h.frames) if x.client == r.client and x.conn == r.conn]
        k = same.index(i)
        for j in same[max(0, k - context): k + context + 1]:
            if j not in shown:
                shown.add(j)
                lines.append(("  > " if j == i else "    ") + frame_line(j, h.frames[j]))
    for i in a.ops:
        o = h.ops[i]
        lines.append(f"  op#{o.index} {o.process} {o.f}@{o.node} invoke={o.invoke:.3f} {o.outcome} "
                     f"complete={o.complete if o.complete is None else round(o.complete, 3)} "
                     f"value={_short(o.value)} result={_short(o.result)}")
    return lines


def summary(h: History, anomalies: Iterable[Anomaly]) -> dict:
    anomalies = list(anomalies)
    return {"seed": h.seed, "topology": h.topology, "operations": len(h.ops), "frames": len(h.frames),
            "faults": dict(sorted(h.fault_counts().items())),
            "anomalies": dict(sorted(Counter(a.kind for a in anomalies).items()))}


def render(h: History, anomalies: list[Anomaly], limit: int = 12) -> str:
    s = summary(h, anomalies)
    out = [f"seed {s['seed']} ({s['topology']}): {s['operations']} operations, {s['frames']} frames, "
           f"faults {s['faults']}, anomalies {s['anomalies'] or 0}"]
    for a in anomalies[:limit]:
        out.append(f"- {a.kind} [{a.client}] {a.detail}")
        out += excerpt(h, a)
    if len(anomalies) > limit:
        out.append(f"... and {len(anomalies) - limit} more")
    return "\n".join(out)
