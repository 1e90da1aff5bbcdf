"""Workers behind one interface, and the driver that feeds them from the shared queue.

A *handle* runs work units on one worker and yields its events (:mod:`.events`), with every computed
record already appended to the store and turned into a light ``Stored`` event:

- :class:`InlineHandle`: the worker lives in this process (one CPU worker; tests with a ``load`` hook).
- :class:`ProcessHandle`: a spawned process per GPU (``CUDA_VISIBLE_DEVICES`` set to its GPU), or
  per CPU slot; it writes its own records (the store is safe for several appenders) and dies with
  the driver (``PR_SET_PDEATHSIG``), so a killed driver never leaves writers behind.
- ``RayHandle`` (:mod:`.ray_backend`): a Ray actor; records stream back and the driver writes them.

:func:`drive` runs an inline handle in the main thread (Ctrl-C interrupts at once) and several
handles with one driver thread each, pulling from one :class:`~.scheduler.Scheduler`. When every
pending job is claimed by another run, a worker emits ``Waiting(line)`` and looks
again after :data:`WAIT_SECONDS`.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from ..processes import die_with_parent, environment
from .events import Computed, Dead, Event, Failed, Finished, Ready, Stored, Waiting
from .jobs import WorkUnit
from .scheduler import Gate, Scheduler, Wait
from .store import ResultStore
from .worker import Worker, WorkerConfig, unit_id


def store_events(events: Iterable[Event], store: ResultStore, keep_records: bool = True) -> Iterator[Event]:
    """``events`` with every computed record appended to the store and passed on as ``Stored``."""
    for event in events:
        if isinstance(event, Computed):
            store.append(event.record)
            yield Stored.of(event, keep_records)
        else:
            yield event


class Handle(Protocol):
    name: str
    inline: bool
    dead: bool

    def run(self, unit: WorkUnit) -> Iterator[Event]: ...

    def abort(self) -> None: ...

    def close(self) -> None: ...


class InlineHandle:
    inline = True

    def __init__(self, config: WorkerConfig, store: ResultStore, name: str = "worker-0") -> None:
        self.name = name
        self.dead = False
        self.store = store
        self.worker = Worker(config, name)

    def run(self, unit: WorkUnit) -> Iterator[Event]:
        yield from store_events(self.worker.run(unit), self.store)

    def abort(self) -> None:
        pass

    def close(self) -> None:
        self.worker.unload()


def process_main(config: WorkerConfig, name: str, out: str, conn: Any, parent: int) -> None:
    """Entry point of a worker process: units in through ``conn``, light events out."""
    die_with_parent()
    if os.getppid() != parent:  # the driver died before the signal was armed
        os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver handles Ctrl-C and stops us
    # an engine may start processes of its own here, which a daemonic process may not; the driver
    # still stops this one at its exit (it started it as a daemon) and the kernel with its death
    multiprocessing.current_process().daemon = False
    store = ResultStore(out, load=False)
    try:
        worker = Worker(config, name)
    except Exception as err:  # noqa: BLE001
        conn.send(Dead(f"{type(err).__name__}: {err}".splitlines()[0]))
        return
    conn.send(Ready())
    try:
        while True:
            try:
                unit = conn.recv()
            except EOFError:
                return
            if unit is None:
                return
            for event in store_events(worker.run(unit), store, keep_records=False):  # keep the pipe light
                conn.send(event)
    finally:
        worker.unload()  # an engine with processes of its own stops them


class ProcessHandle:
    inline = False

    def __init__(
        self,
        config: WorkerConfig,
        out: str,
        name: str,
        env: dict[str, str] | None = None,
        start_lock: threading.Lock | None = None,
    ) -> None:
        self.name = name
        self.dead = False
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(
            target=process_main, args=(config, name, out, child, os.getpid()), name=name, daemon=True
        )
        # A spawned child inherits os.environ as it is at start: set the GPU for this child only.
        with start_lock or contextlib.nullcontext(), environment(env or {}):
            self.process.start()
        child.close()
        self._ready = False

    def _recv(self) -> Event | None:
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            return None

    def _died(self, uid: str | None) -> Event:
        self.dead = True
        self.process.join(timeout=5)
        return Failed(uid, f"worker {self.name} died (exit code {self.process.exitcode})")

    def run(self, unit: WorkUnit) -> Iterator[Event]:
        uid = unit_id(unit)
        if not self._ready:
            event = self._recv()
            if not isinstance(event, Ready):
                self.dead = True
                error = event.error if isinstance(event, Dead) else f"worker {self.name} failed to start"
                yield Failed(uid, error)
                return
            self._ready = True
        try:
            self.conn.send(unit)
        except (BrokenPipeError, OSError):
            yield self._died(uid)
            return
        while True:
            event = self._recv()
            if event is None:
                yield self._died(uid)
                return
            yield event
            if isinstance(event, (Finished, Failed)):
                return

    def abort(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.dead = True

    def close(self) -> None:
        if self.process.is_alive():
            with contextlib.suppress(BrokenPipeError, OSError):
                self.conn.send(None)
            self.process.join(timeout=10)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(timeout=5)
        self.conn.close()


WAIT_SECONDS = 0.5  # how often a worker whose jobs are all held by another run looks again


def _serve(handle: Handle, scheduler: Scheduler, emit: Callable[[Event], None]) -> None:
    loaded = None
    while not handle.dead:
        unit = scheduler.take(loaded)
        if unit is None:
            return
        if isinstance(unit, Wait):
            for reason in unit.reasons:
                emit(Waiting(reason))
            time.sleep(WAIT_SECONDS)
            continue
        try:
            for event in handle.run(unit):
                emit(event)
        finally:
            scheduler.release(unit)
        loaded = unit.job.group()


def drive(
    units: list[WorkUnit],
    handles: list[Handle],
    on_event: Callable[[Event], None],
    gate: Gate | None = None,
) -> list[WorkUnit]:
    """Run ``units`` on ``handles`` (with the job claims of ``gate``); returns the units never started
    (all workers died)."""
    scheduler = Scheduler(units, gate)
    if len(handles) == 1 and handles[0].inline:
        _serve(handles[0], scheduler, on_event)
        return scheduler.close()
    events: queue.Queue[Event] = queue.Queue()
    threads = [
        threading.Thread(target=_serve, args=(h, scheduler, events.put), name=f"drive-{h.name}", daemon=True)
        for h in handles
    ]
    for thread in threads:
        thread.start()
    try:
        while any(t.is_alive() for t in threads) or not events.empty():
            try:
                event = events.get(timeout=0.1)
            except queue.Empty:
                continue
            on_event(event)
    except BaseException:
        scheduler.close()
        for handle in handles:
            handle.abort()
        for thread in threads:
            thread.join(timeout=5)
        raise
    return scheduler.close()
