"""What a loaded machine does to the latencies a test measures: the scheduling noise beside a
run, so that a test holds upper bounds only where the machine is quiet."""

from __future__ import annotations

import threading
import time


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


#: a 5 ms sleep's p99 lateness below which the machine counts as quiet
QUIET_MS = 1.0


class Lateness:
    """How late a 5 ms sleep wakes up on this machine while a run goes (p99, ms): the
    scheduling noise a loaded machine adds to any latency the run measures."""

    def __enter__(self) -> Lateness:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.is_set():
            t0 = time.perf_counter()
            time.sleep(0.005)
            self.samples.append((time.perf_counter() - t0 - 0.005) * 1e3)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def p99_ms(self) -> float:
        return p99(self.samples)

    @property
    def quiet(self) -> bool:
        """Whether the machine was quiet enough for a test's upper bounds on latency."""
        return self.p99_ms < QUIET_MS
