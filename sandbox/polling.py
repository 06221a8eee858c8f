"""The loop every stand-in of a node-side agent runs (the GPU nodes' agents, the DRA kubelet
plugin, a test's kubelet): `sync()` every `interval` seconds on a daemon thread until `stop()`. A
pass that raises is kept in `errors` and the next pass goes on, as a transient API error must not
stop an agent."""

from __future__ import annotations

import threading


class PollingAgent:
    """Mixed into a stand-in that has `interval`, `errors`, `_stop` (an Event), `_thread` and
    `sync()`; a dataclass declares them as its own fields."""

    THREAD_NAME = "agents"
    interval: float
    errors: list[str]
    _stop: threading.Event
    _thread: threading.Thread | None

    def sync(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.THREAD_NAME, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync()
            except Exception as exc:  # keep going: a transient API error must not stop the agent
                self.errors.append(str(exc))
            self._stop.wait(self.interval)
