"""Progress lines for long loops (encoding, indexing, generation): count, rate and ETA.

A job that runs for an hour on a cluster node is only visible through its log; a line per item
floods it and a line at the end tells nothing while it runs. `Progress` logs at a steady
interval of wall time instead, whatever the loop's pace, with the rate so far and the time
left at that rate. The clock is a parameter so the interval logic is testable without waiting.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

DEFAULT_INTERVAL_S = 30.0


def format_duration(seconds: float) -> str:
    """Compact h/m/s: '42s', '3m05s', '1h02m' (seconds dropped past an hour: nobody plans by them)."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def format_rate(per_second: float, unit: str) -> str:
    """Items per second, or per minute when slower than one a second (0.02 items/s reads badly)."""
    if per_second >= 1 or per_second == 0:
        return f"{per_second:.1f} {unit}/s"
    return f"{per_second * 60:.1f} {unit}/min"


class Progress:
    """Counts work done and logs `label: done/total (pct), rate, ETA` every `interval_s` seconds."""

    def __init__(
        self,
        label: str,
        total: int | None,
        unit: str = "items",
        interval_s: float = DEFAULT_INTERVAL_S,
        logger: logging.Logger | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.interval_s = interval_s
        self.log = logger or logging.getLogger("cqabench.common.progress")
        self.clock = clock
        self.done = 0
        self.started = clock()
        self.last = self.started

    def message(self) -> str:
        """The line as it would be logged now."""
        elapsed = self.clock() - self.started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        parts = [f"{self.label}: {self.done}"]
        if self.total:
            parts[0] += f"/{self.total} ({100 * self.done / self.total:.0f}%)"
        parts.append(format_rate(rate, self.unit))
        parts.append(f"elapsed {format_duration(elapsed)}")
        if self.total and self.done < self.total:
            parts.append(f"ETA {format_duration((self.total - self.done) / rate)}" if rate > 0 else "ETA unknown")
        return ", ".join(parts)

    def update(self, n: int = 1) -> str | None:
        """Count `n` more; log and return the line when an interval has passed since the last one."""
        self.done += n
        now = self.clock()
        if now - self.last < self.interval_s:
            return None
        self.last = now
        line = self.message()
        self.log.info("%s", line)
        return line

    def finish(self) -> str:
        """Log the final line (total time and mean rate) whatever the interval."""
        line = self.message()
        self.log.info("%s (done)", line)
        return line
