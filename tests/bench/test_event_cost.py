"""The core bench's cold measure: which cache it evicts, and that the eviction reads real memory."""

from __future__ import annotations

import os

from bench import event_cost


def _cache(root, index: str, size: str) -> None:
    d = os.path.join(root, index)
    os.makedirs(d)
    with open(os.path.join(d, "size"), "w") as f:
        f.write(size + "\n")


def test_the_last_level_cache_is_the_largest_one_sysfs_lists(tmp_path):
    _cache(tmp_path, "index0", "32K")
    _cache(tmp_path, "index2", "1024K")
    _cache(tmp_path, "index3", "32768K")
    os.makedirs(tmp_path / "uevent-only")  # an entry without a size is skipped
    assert event_cost.llc_bytes(str(tmp_path)) == 32 * 1024 * 1024


def test_a_machine_without_cache_information_gets_the_default(tmp_path):
    assert event_cost.llc_bytes(str(tmp_path / "absent")) == event_cost.LLC_DEFAULT
    _cache(tmp_path, "index0", "garbage")
    assert event_cost.llc_bytes(str(tmp_path)) == event_cost.LLC_DEFAULT


def test_the_evictor_holds_written_memory_of_the_size_asked():
    ev = event_cost.Evictor(1 << 20)
    assert len(ev.buf) == 1 << 20
    assert ev.buf.count(0) == 0  # written, not zero pages
    ev()  # a pass over it finds nothing and changes nothing
    assert ev.buf.count(1) == 1 << 20
