"""Live progress for ``lampe-eval run`` (rich): one bar per running job, samples/s and ETA."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from .events import Event, Failed, Finished, Loading, Skipped, Started, Stored, Waiting, Warned


class SpeedColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        if not speed:
            return Text("-", style="progress.data.speed")
        if speed >= 1:
            return Text(f"{speed:.2f} samples/s", style="progress.data.speed")
        return Text(f"{1 / speed:.1f} s/sample", style="progress.data.speed")


class RunProgress:
    """Feed it the runner's events; use as a context manager around the run."""

    def __init__(self, console: Console, units: int, *, enabled: bool = True) -> None:
        self.console = console
        self.enabled = enabled
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}", markup=False),
            BarColumn(bar_width=24),
            MofNCompleteColumn(),
            SpeedColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
            disable=not enabled,
        )
        self.overall = self.progress.add_task("all jobs", total=units)
        self.tasks: dict[str, Any] = {}
        self.describe: dict[str, str] = {}
        self.counts: dict[str, list] = {}  # uid -> [new samples, seconds]
        self.samples = 0
        self.skipped = 0
        self.failed = 0
        self.waits: set[str] = set()

    def __enter__(self) -> RunProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def log(self, message: str) -> None:
        """A line above the bars (printed also without bars, e.g. in CI logs)."""
        self.progress.console.print(message, highlight=False, markup=False, soft_wrap=True)

    def __call__(self, event: Event) -> None:
        uid = str(getattr(event, "unit", None) or "")
        if isinstance(event, Loading):
            self.log(f"{event.worker}: loading {event.model}")
        elif isinstance(event, Warned):
            self.log(f"WARNING {event.message}")
        elif isinstance(event, Waiting):
            if event.message not in self.waits:  # said once per job
                self.waits.add(event.message)
                self.log(f"WAITING {event.message}")
        elif isinstance(event, Started):
            self.describe[uid] = event.describe
            self.counts[uid] = [0, 0.0]
            self.tasks[uid] = self.progress.add_task(event.describe, total=event.total)
        elif isinstance(event, Stored):
            self._stored(uid, event.seconds)
        elif isinstance(event, Skipped):
            self._skipped(uid)
        elif isinstance(event, (Finished, Failed)):
            self._ended(uid, event)
        self._update_overall()

    def _stored(self, uid: str, seconds: float) -> None:
        self.samples += 1
        if uid in self.counts:
            self.counts[uid][0] += 1
            self.counts[uid][1] += seconds
        if uid in self.tasks:
            self.progress.advance(self.tasks[uid])

    def _skipped(self, uid: str) -> None:
        self.skipped += 1
        task_id = self.tasks.get(uid)
        if task_id is not None:
            # Progress.tasks is a list in creation order, not indexed by id once tasks were removed
            total = next((t.total for t in self.progress.tasks if t.id == task_id), None)
            if total:  # the bar counts new samples only
                self.progress.update(task_id, total=total - 1)

    def _ended(self, uid: str, event: Finished | Failed) -> None:
        task_id = self.tasks.pop(uid, None)
        if task_id is not None:
            self.progress.remove_task(task_id)
        self.progress.advance(self.overall)
        describe = self.describe.get(uid) or getattr(event, "describe", "") or uid or "worker"
        if isinstance(event, Failed):
            self.failed += 1
            self.log(f"FAILED {describe}: {event.error}")
        else:
            count, seconds = self.counts.get(uid, [0, 0.0])
            speed = f", {seconds / count:.1f} s/sample" if count else ""
            self.log(f"done {describe} ({count} new sample(s){speed})")

    def _update_overall(self) -> None:
        self.progress.update(
            self.overall,
            description=f"all jobs ({self.samples} new, {self.skipped} resumed"
            + (f", {self.failed} failed)" if self.failed else ")"),
        )
