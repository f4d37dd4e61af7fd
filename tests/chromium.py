"""A headless Chromium driven over the DevTools protocol, for testing pages in a real browser.

Chromium is started with ``--remote-debugging-pipe``: it reads protocol commands from file
descriptor 3 and writes responses and events to descriptor 4, each message JSON ended by a NUL
byte. No port, no websocket, no third-party client. The page's uncaught exceptions, console errors
and browser log errors are collected, as are requests for anything but file: and data: URLs.

    python tests/chromium.py PAGE.html OUT.png [WIDTH HEIGHT [#FRAGMENT [JS]]]   # a screenshot of a page

(``JS`` runs in the page before the screenshot, e.g. to set a filter.)
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--mute-audio",
    "--hide-scrollbars",
    "--enable-logging=stderr",
    "--v=0",
    "--remote-debugging-pipe",
]


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


class BrowserError(RuntimeError):
    pass


class Chromium:
    """One headless browser with one page. Use as a context manager."""

    def __init__(self, binary: str, profile: Path, timeout_s: float = 60.0) -> None:
        self.timeout_s = timeout_s
        self.errors: list[str] = []  # uncaught exceptions, console.error, log entries of level error
        self.requests: list[str] = []  # URLs the page asked for
        self._events: queue.Queue[dict[str, Any]] = queue.Queue()
        self._replies: dict[int, dict[str, Any]] = {}
        self._cond = threading.Condition()
        self._next_id = 0
        self.session: str | None = None
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire_fds() -> None:  # in the child: the protocol pipes on descriptors 3 and 4
            r = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)
            w = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
            os.dup2(r, 3)
            os.dup2(w, 4)

        self.stderr = open(profile / "chromium-stderr.log", "wb")
        self.proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.stderr,
            pass_fds=(3, 4),
            preexec_fn=wire_fds,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    # ------------------------------------------------------------------ protocol
    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = os.read(self._from_browser, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                with self._cond:
                    self._replies[-1] = {"error": {"message": "browser closed the pipe"}}
                    self._cond.notify_all()
                return
            buffer += chunk
            while b"\0" in buffer:
                raw, buffer = buffer.split(b"\0", 1)
                message = json.loads(raw)
                if "id" in message:
                    with self._cond:
                        self._replies[message["id"]] = message
                        self._cond.notify_all()
                else:
                    self._on_event(message)

    def _on_event(self, message: dict[str, Any]) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            self.errors.append(f"uncaught exception: {text} (line {details.get('lineNumber')})")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            self.errors.append(f"console.{params['type']}: {args}")
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            self.errors.append(f"log: {params['entry'].get('text')} {params['entry'].get('url', '')}")
        elif method == "Network.requestWillBeSent":
            self.requests.append(params["request"]["url"])
        self._events.put(message)

    def send(self, method: str, params: dict[str, Any] | None = None, session: bool = True) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout_s
        with self._cond:
            while self._next_id not in self._replies:
                if -1 in self._replies:
                    raise BrowserError(f"{method}: browser exited ({self._stderr_tail()})")
                if not self._cond.wait(timeout=max(0.0, deadline - time.monotonic())):
                    raise BrowserError(f"{method}: no reply within {self.timeout_s:.0f} s")
            reply = self._replies.pop(self._next_id)
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait_event(self, method: str) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                message = self._events.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise BrowserError(f"no {method} within {self.timeout_s:.0f} s") from None
            if message.get("method") == method:
                return message.get("params", {})

    def _stderr_tail(self) -> str:
        self.stderr.flush()
        return Path(self.stderr.name).read_text(errors="replace")[-2000:]

    # ------------------------------------------------------------------ page
    def open(self, url: str, width: int = 1280, height: int = 900) -> None:
        """Open ``url`` in a fresh page and wait for its load event."""
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.send(
            "Target.attachToTarget", {"targetId": target, "flatten": True}, session=False
        )["sessionId"]
        for domain in ("Runtime", "Log", "Page", "Network"):
            self.send(f"{domain}.enable")
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        self.send("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-serialisable values)."""
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression!r}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def wait_for(self, expression: str) -> Any:
        """Poll ``expression`` until it is truthy; an error in the page ends the wait at once."""
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline and not self.errors:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.05)
        if self.errors:
            raise BrowserError(f"the page failed while waiting for {expression!r}: {self.errors}")
        raise BrowserError(f"{expression!r} stayed false for {self.timeout_s:.0f} s")

    def screenshot(self, path: Path, full_page: bool = True, max_height: int = 8000) -> Path:
        """A PNG of the page (its whole height, up to ``max_height`` pixels, with ``full_page``)."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.send("Page.getLayoutMetrics")["cssContentSize"]
            height = min(int(size["height"]), max_height)
            params.update(
                captureBeyondViewport=True,
                clip={"x": 0, "y": 0, "width": int(size["width"]), "height": height, "scale": 1},
            )
        data = self.send("Page.captureScreenshot", params)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self.send("Browser.close", session=False)
        except BrowserError:
            pass
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        self.stderr.close()

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(argv: list[str]) -> int:
    page, out = Path(argv[0]).resolve(), Path(argv[1])
    width, height = (int(argv[2]), int(argv[3])) if len(argv) >= 4 else (1400, 0)
    binary = find_chromium()
    if binary is None:
        print("chromium not found (apt-get install -y chromium)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as profile, Chromium(binary, Path(profile)) as browser:
        fragment = argv[4] if len(argv) >= 5 else ""  # e.g. #rollouts: the view starts there
        browser.open(page.as_uri() + fragment, width=width, height=height or 900)
        browser.wait_for("document.body.dataset.ready === '1'")
        if len(argv) >= 6:
            browser.evaluate(argv[5])
        if height:
            browser.screenshot(out, full_page=False)
        else:
            browser.screenshot(out)
        if browser.errors:
            print("\n".join(browser.errors), file=sys.stderr)
            return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
