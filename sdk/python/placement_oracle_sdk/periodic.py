"""A task run every `interval` seconds on a thread of its own until stopped; what it raises is
logged and the next round tries again (a runtime's callback that raises, e.g. `hand_over`, must
not end the thread for good: the work is still there)."""

from __future__ import annotations

import logging
import threading

from .client import OracleError

log = logging.getLogger("placement_oracle_sdk")


class Periodic:
    """Subclasses give `name`, `interval` and `tick()`."""

    name = "periodic"
    interval = 1.0

    def tick(self) -> object:
        raise NotImplementedError

    def start(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.tick()
            except OracleError as error:
                log.debug("%s: %s", self.name, error)
            except Exception:
                log.exception("%s: a round raised", self.name)

    def stop(self) -> None:
        """Stops after the round under way, if any."""
        if getattr(self, "_thread", None) is not None:
            self._stop.set()
            self._thread.join()
