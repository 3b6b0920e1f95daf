"""Headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``).

No driver binary and no websocket: Chromium reads commands on fd 3 and writes answers and
events on fd 4, each a JSON object ending in a NUL byte. A pipe also crosses network
namespaces, so the browser can run next to the bridge while the test stays outside.
"""

import base64
import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

FLAGS = (
    "--headless",
    "--no-sandbox",  # root in a test namespace
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--mute-audio",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)


class Browser:
    """One Chromium, one page: ``call`` a method, read the ``events`` it sent."""

    def __init__(self, wrap: Callable[..., list[str]], profile: Path) -> None:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        self.log = profile.with_suffix(".log")
        # A tiny exec wrapper puts our pipe ends on fds 3 and 4, where Chromium looks for
        # them (dash cannot redirect fds above 9).
        onto_3_and_4 = (
            "import os, sys; os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4); "
            "os.execvp(sys.argv[3], sys.argv[3:])"
        )
        wrapper = (sys.executable, "-c", onto_3_and_4, str(to_chrome_r), str(from_chrome_w))
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                wrap(*wrapper, "chromium", *FLAGS, f"--user-data-dir={profile}", "about:blank"),
                pass_fds=(to_chrome_r, from_chrome_w),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.events: list[dict[str, Any]] = []
        self._answers: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._next_id = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.session = ""
        targets = self.call("Target.getTargets", session=None)["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.call(
            "Target.attachToTarget", {"targetId": page["targetId"], "flatten": True}, session=None
        )["sessionId"]

    def _read(self) -> None:
        buffer = b""
        while True:
            chunk = os.read(self._from_chrome, 1 << 16)
            if not chunk:
                self._answers.put(None)
                return
            buffer += chunk
            while b"\0" in buffer:
                raw, buffer = buffer.split(b"\0", 1)
                message = json.loads(raw)
                if "id" in message:
                    self._answers.put(message)
                else:
                    self.events.append(message)

    def call(
        self, method: str, params: dict[str, Any] | None = None, *, session: str | None = ""
    ) -> dict[str, Any]:
        """Send one command (to the page's session unless ``session=None``), wait for it."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        sid = self.session if session == "" else session
        if sid:
            message["sessionId"] = sid
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + 30
        while True:
            answer = self._answers.get(timeout=max(0.1, deadline - time.monotonic()))
            if answer is None:
                raise RuntimeError(f"chromium exited: {self.stderr_tail()}")
            if answer["id"] == self._next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                result: dict[str, Any] = answer.get("result", {})
                return result

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float) -> Any:
        """Poll until the expression is truthy; returns its value."""
        deadline = time.monotonic() + timeout
        error = ""
        while True:
            try:
                value = self.evaluate(expression)
            except RuntimeError as exc:  # e.g. the page is still loading: no body yet
                value, error = None, str(exc)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"{expression!r} still falsy after {timeout}s {error}")
            time.sleep(0.2)

    def viewport(self, width: int, height: int, *, mobile: bool) -> None:
        """Emulate a screen of that size (a phone with ``mobile``)."""
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile},
        )

    def screenshot(self, path: Path, *, full_page: bool = True) -> None:
        """A PNG of the page (all of it with ``full_page``)."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.call("Page.getLayoutMetrics")["cssContentSize"]
            params |= {
                "captureBeyondViewport": True,
                "clip": {
                    "x": 0,
                    "y": 0,
                    "width": size["width"],
                    "height": size["height"],
                    "scale": 1,
                },
            }
        data = self.call("Page.captureScreenshot", params)["data"]
        path.write_bytes(base64.b64decode(data))

    def methods(self, names: Sequence[str]) -> list[dict[str, Any]]:
        """The events received so far of those methods."""
        return [e for e in self.events if e.get("method") in names]

    def stderr_tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:]

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, queue.Empty, OSError):
            self.call("Browser.close", session=None)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        os.close(self._to_chrome)
