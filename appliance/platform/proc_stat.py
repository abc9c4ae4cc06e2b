"""A process's numbers from /proc/PID/stat (Linux), by field number as proc(5) counts them."""
from __future__ import annotations


def stat_fields(pid: int | None, *numbers: int) -> tuple[int, ...] | None:
    """Fields `numbers` of /proc/PID/stat as integers (22: start time in ticks since boot; 14, 15: user and system
    CPU ticks; 23: address space in bytes), None when there is no such process or it cannot be read. The command
    name (field 2) may hold spaces and parentheses, so the fields are counted from its last `)`."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            after_name = stat.read().rsplit(b")", 1)[1].split()
        return tuple(int(after_name[n - 3]) for n in numbers)
    except (OSError, ValueError, IndexError):
        return None
