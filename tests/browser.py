"""A real headless Chromium driven over the DevTools protocol (the ``websocket-client`` package), for the
report.html tests: load a page, collect console errors, uncaught exceptions, log errors and network
requests, run JavaScript in the page, take a screenshot.

Chromium is Debian's ``chromium`` package (``make setup`` installs it when root); ``CHROMIUM`` names
another binary. :func:`find_chromium` says why it cannot run (the tests skip with that line).
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
INSTALL_HINT = "sudo apt-get install -y chromium (`make setup` does it when run as root)"


def find_chromium() -> tuple[str | None, str]:
    """(the browser binary, "") or (None, why not: one line)."""
    try:
        import websocket  # noqa: F401
    except ImportError:
        return None, "the browser test needs websocket-client: pip install -e '.[dev]'"
    named = os.environ.get("CHROMIUM")
    binary = shutil.which(named) if named else next(filter(None, map(shutil.which, CANDIDATES)), None)
    if binary is None:
        return None, f"no Chromium found ({named or ', '.join(CANDIDATES)}): {INSTALL_HINT}"
    return binary, ""


class Browser:
    """One headless Chromium with one page; use as a context manager."""

    def __init__(self, binary: str, width: int = 1400, height: int = 1000) -> None:
        self.profile = tempfile.TemporaryDirectory(prefix="lampe-eval-chromium-")
        flags = [
            "--headless=new",
            "--no-sandbox",  # root in containers and CI
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--remote-debugging-port=0",
            f"--user-data-dir={self.profile.name}",
            f"--window-size={width},{height}",
            "about:blank",
        ]
        self.process = subprocess.Popen(
            [binary, *flags], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []
        self.socket = self._connect(self._port())
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")

    def _port(self, timeout: float = 30.0) -> int:
        marker = Path(self.profile.name) / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.process.returncode}")
            if marker.is_file() and marker.read_text().strip():
                return int(marker.read_text().split()[0])
            time.sleep(0.05)
        raise TimeoutError("chromium did not open its DevTools port")

    def _connect(self, port: int) -> Any:
        import websocket

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as reply:
            targets = json.load(reply)
        page = next(t for t in targets if t.get("type") == "page")
        return websocket.create_connection(page["webSocketDebuggerUrl"], timeout=30, suppress_origin=True)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send a DevTools command and return its result (events that arrive meanwhile are kept)."""
        number = next(self.ids)
        self.socket.send(json.dumps({"id": number, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == number:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def wait_for(self, event: str, timeout: float = 30.0) -> dict[str, Any]:
        seen = next((e for e in self.events if e.get("method") == event), None)
        deadline = time.monotonic() + timeout
        while seen is None:
            self.socket.settimeout(max(0.1, deadline - time.monotonic()))
            message = json.loads(self.socket.recv())
            self.events.append(message)
            if message.get("method") == event:
                seen = message
        self.socket.settimeout(30)
        return seen

    def open(self, path: Path) -> None:
        """Load a file and wait for its load event."""
        self.events.clear()
        self.call("Page.navigate", url=path.resolve().as_uri())
        self.wait_for("Page.loadEventFired")

    def run(self, script: str) -> Any:
        """Evaluate JavaScript in the page and return its (JSON) value; an exception fails."""
        result = self.call("Runtime.evaluate", expression=script, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and browser log errors (e.g. a blocked resource) so far."""
        out = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                out.append("console: " + " ".join(str(a.get("value", a)) for a in params.get("args", [])))
            elif method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                out.append("exception: " + str(details.get("exception", {}).get("description", details)))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                out.append("log: " + params["entry"].get("text", ""))
        return out

    def requests(self) -> list[str]:
        """URLs the page requested (itself included)."""
        return [
            e["params"]["request"]["url"]
            for e in self.events
            if e.get("method") == "Network.requestWillBeSent"
        ]

    def screenshot(self, path: Path, full_page: bool = False) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
            size = self.call("Page.getLayoutMetrics")["cssContentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", **params)["data"]))
        return path

    def close(self) -> None:
        try:
            self.socket.close()
        finally:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.profile.cleanup()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
