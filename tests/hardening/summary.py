"""Figures collected by the hardening tests, printed at the end of the session (conftest)."""

from __future__ import annotations

import os
from typing import Any

SCALE = float(os.environ.get("HARDENING_SCALE", "1") or "1")


def scaled(n: float, minimum: int = 1) -> int:
    return max(minimum, int(round(n * SCALE)))


class Summary:
    def __init__(self) -> None:
        self.faults: list[str] = []
        self.events_checked = 0
        self.events_lost = 0
        self.duplicates = 0
        self.garbage_tried = 0
        self.garbage_answered = 0
        self.garbage_by_decoder: dict[str, list[int]] = {}
        self.connections: dict[str, int] = {}
        self.resources: list[tuple[str, int, int, int, int]] = []  # label, rss0, rss1, fds0, fds1
        self.notes: list[str] = []
        self.fd_limit = 0

    def fault(self, name: str) -> None:
        self.faults.append(name)

    def events(self, checked: int, lost: int = 0, duplicates: int = 0) -> None:
        self.events_checked += checked
        self.events_lost += lost
        self.duplicates += duplicates

    def garbage(self, decoder: str, tried: int, answered: int) -> None:
        self.garbage_tried += tried
        self.garbage_answered += answered
        t = self.garbage_by_decoder.setdefault(decoder, [0, 0])
        t[0] += tried
        t[1] += answered

    def held(self, label: str, n: int) -> None:
        self.connections[label] = max(n, self.connections.get(label, 0))

    def resource(self, label: str, rss0: int, rss1: int, fds0: int, fds1: int) -> None:
        self.resources.append((label, rss0, rss1, fds0, fds1))

    def note(self, text: str) -> None:
        self.notes.append(text)

    def empty(self) -> bool:
        return not (self.faults or self.garbage_tried or self.connections or self.resources or self.notes
                    or self.events_checked)

    def lines(self) -> list[str]:
        out = [f"hardening summary (HARDENING_SCALE={SCALE:g}, descriptor limit {self.fd_limit})"]
        out.append(f"  faults survived: {len(self.faults)}" + (f" ({', '.join(self.faults)})" if self.faults else ""))
        out.append(f"  events checked: {self.events_checked}; lost: {self.events_lost}; duplicates delivered: {self.duplicates}")
        out.append(f"  garbage inputs tried: {self.garbage_tried}; answered with the protocol's error or a documented drop: {self.garbage_answered}")
        for name, (t, a) in sorted(self.garbage_by_decoder.items()):
            out.append(f"    {name}: {a}/{t}")
        if self.connections:
            out.append("  connections held: " + ", ".join(f"{k} {v}" for k, v in self.connections.items()))
        for label, rss0, rss1, fds0, fds1 in self.resources:
            out.append(f"  {label}: RSS {rss0 / 1e6:.1f} -> {rss1 / 1e6:.1f} MB, descriptors {fds0} -> {fds1}")
        for n in self.notes:
            out.append(f"  {n}")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "scale": SCALE, "faults": self.faults, "events_checked": self.events_checked,
            "events_lost": self.events_lost, "duplicates": self.duplicates, "garbage_tried": self.garbage_tried,
            "garbage_answered": self.garbage_answered, "garbage_by_decoder": self.garbage_by_decoder,
            "connections": self.connections, "resources": self.resources, "notes": self.notes,
            "fd_limit": self.fd_limit,
        }


SUMMARY = Summary()
