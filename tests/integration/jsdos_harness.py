"""js-dos's own emulator (npm ``emulators``, wasm DOSBox) in headless Chromium, as an IPX client.

js-dos speaks the DOSBox IPX protocol over a WebSocket (one binary message = one IPX packet,
docs/protocols.md 3.10). ``JsDos`` runs one Chromium (inside a network namespace through
``wrap``, like ``cdp.Browser``) and opens one tab per ``Emulator``; each tab loads
``jsdos/page.html``, which boots DOSBox with the DOS programs on ``C:`` and exposes a small API
(``jsdos/jsdos.js``) that this module calls with ``Runtime.evaluate``::

    dos = JsDos(lambda *cmd: net.exec_args(box, *cmd), workdir)
    try:
        a = dos.emulator(assemble(workdir / "bin"))
        address = a.connect("ws://10.57.0.1:8080/ipx/room", timeout=5)
        a.type("IPXRECV 5 20")
        print(a.wait_file("RECV.TXT", timeout=30))
    finally:
        dos.close()

No HTTP server: the browser's requests for ``http://jsdos.localhost/...`` are answered from
``tests/integration/jsdos/`` over the DevTools protocol (Fetch domain), so the page works in any
namespace. Every wait polls the page's published state with a deadline. The emulator comes from
``npm ci --prefix tests/integration/jsdos`` (``emulators`` pinned to 8.3.9: 8.4.x replaced the
WebSocket network with WebRTC).
"""

import base64
import contextlib
import hashlib
import json
import queue
import re
import ssl
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from scripts.cdp import Browser

HERE = Path(__file__).resolve().parent / "jsdos"
DIST = HERE / "node_modules" / "emulators" / "dist"
ORIGIN = "http://jsdos.localhost"  # answered by the harness, never resolved
PAGE = f"{ORIGIN}/page.html"
NPM_CI = "npm ci --prefix tests/integration/jsdos"
BOOT_MARK = "BOOTED.TXT"  # the autoexec's last line creates it: DOSBox is at the prompt
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".wasm": "application/wasm",
    ".map": "application/json",
}
POLL = 0.05  # seconds between two looks at a page's state
LOG_TAIL = 60  # page log lines quoted in an error
UNTHROTTLED = (
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows",
)
LOCAL_NETWORK_PERMISSIONS = ("local-network-access", "local-network", "loopback-network")


class JsDosError(RuntimeError):
    """The emulator or its page failed; the message carries the page's log."""


def dosbox_conf(cycles: str = "fixed 3000") -> str:
    """The ``.jsdos/dosbox.conf`` of every emulator: IPX on, ``C:`` the emulator's files.

    The cycle count hardly matters for cost: the worker keeps about one core busy whatever
    it is (measured: "auto", "fixed 3000" and "fixed 500" alike); ``Emulator.pause`` is what
    saves CPU.
    """
    return "\n".join(
        (
            "[sdl]",
            "autolock=false",
            "[dosbox]",
            "machine=svga_s3",
            "memsize=16",
            "[cpu]",
            "core=normal",
            f"cycles={cycles}",
            "[mixer]",
            "nosound=true",
            "[sblaster]",
            "sbtype=none",
            "[speaker]",
            "pcspeaker=false",
            "[ipx]",
            "ipx=true",
            "[autoexec]",
            "echo off",
            "mount c .",
            "c:",
            f"echo BOOTED> {BOOT_MARK}",
            "",
        )
    )


def _der_items(data: bytes, start: int, end: int) -> list[tuple[int, int, int]]:
    """The (tag, start of header, end) of each DER element in ``data[start:end]``."""
    items = []
    pos = start
    while pos < end:
        tag = data[pos]
        length = data[pos + 1]
        header = 2
        if length & 0x80:
            count = length & 0x7F
            length = int.from_bytes(data[pos + 2 : pos + 2 + count], "big")
            header += count
        items.append((tag, pos, pos + header + length))
        pos += header + length
    return items


def _der_body(data: bytes, pos: int) -> int:
    """Where the contents of the DER element at ``pos`` start."""
    length = data[pos + 1]
    return pos + 2 + (length & 0x7F if length & 0x80 else 0)


def spki_sha256(cert_pem: str) -> str:
    """Base64 SHA-256 of a certificate's SubjectPublicKeyInfo (Chromium's SPKI hash)."""
    der = ssl.PEM_cert_to_DER_cert(cert_pem)
    cert = _der_items(der, 0, len(der))[0]
    tbs = _der_items(der, _der_body(der, cert[1]), cert[2])[0]
    fields = _der_items(der, _der_body(der, tbs[1]), tbs[2])
    # version [0] (optional), serial, signature, issuer, validity, subject, SPKI
    if fields[0][0] == 0xA0:
        fields = fields[1:]
    _, spki_start, spki_end = fields[5]
    return base64.b64encode(hashlib.sha256(der[spki_start:spki_end]).digest()).decode()


def ca_flags(ca_cert: Path) -> list[str]:
    """Chromium flags that make it accept the test servers' certificates (``ca_cert``: PEM).

    ``--ignore-certificate-errors-spki-list`` (honoured when ``--user-data-dir`` is given, as
    cdp.Browser does) lists the SHA-256 of public keys; Chromium then accepts, with no further
    check (not even the host name), a chain the server *sent* that holds one of these keys.
    Every certificate of the PEM is listed. So: a server that sends its chain (leaf + CA) is
    accepted with the CA alone; for one that sends only its leaf, put the leaf in the PEM too.
    Needs no root, no NSS database and no system change.
    """
    pems = re.findall(
        r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", ca_cert.read_text(), re.DOTALL
    )
    if not pems:
        raise JsDosError(f"{ca_cert}: no PEM certificate")
    return [f"--ignore-certificate-errors-spki-list={','.join(spki_sha256(p) for p in pems)}"]


class Emulator:
    """One tab: a js-dos DOSBox at its prompt, with the programs on ``C:``."""

    def __init__(self, jsdos: "JsDos", name: str, target_id: str, session: str) -> None:
        self.jsdos = jsdos
        self.name = name
        self.target_id = target_id
        self.session = session
        self.closed = False
        self.browser_log: list[str] = []  # Chromium's own messages for this tab (Log domain)

    # -- the page ------------------------------------------------------------------------

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in this tab (promises awaited)."""
        result = self.jsdos.browser.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            session=self.session,
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise JsDosError(f"{self.name}: {expression[:80]}: {text}")
        return result["result"].get("value")

    def state(self) -> dict[str, Any]:
        """The page's published state (``window.jsdos.state`` but its log; ``{}`` before).

        Keys: phase (loading, loaded, starting, running, exited, failed), error, version, net
        ("", connecting, connected, failed), netError, typing, typed, exited, ws (see
        ``websockets``).
        """
        value = self.evaluate(
            "window.jsdos ? (({log, ...rest}) => rest)(window.jsdos.state) : null"
        )
        return value if isinstance(value, dict) else {}

    def log(self) -> list[str]:
        """The page's log: console output, DOSBox's stdout, WebSocket events."""
        try:
            lines = self.evaluate("window.jsdos ? window.jsdos.state.log : []")
            return [str(line) for line in lines or []]
        except (RuntimeError, queue.Empty) as exc:
            return [f"(no page log: {exc})"]

    def websockets(self) -> list[dict[str, Any]]:
        """What the tap on the page's WebSocket saw: one record per socket the emulator opened.

        Each: url, opened, protocol, extensions, error, closed, closeCode, closeReason, sent,
        received, sentFrames and receivedFrames (the first few messages, hex).
        """
        return list(self.state().get("ws", []))

    def fail(self, message: str) -> JsDosError:
        """An error with this tab's log and the browser's own output."""
        tail = "\n  ".join(self.log()[-LOG_TAIL:])
        with contextlib.suppress(RuntimeError, queue.Empty):
            self.jsdos.serve()
        browser_log = "\n  ".join(self.browser_log[-10:]) or "(none)"
        return JsDosError(
            f"{self.name}: {message}\n page log:\n  {tail}\n"
            f" browser log (network errors and the like):\n  {browser_log}\n"
            f" chromium output (tail):\n{self.jsdos.browser.stderr_tail()[-800:]}"
        )

    def wait(self, what: str, check: Callable[[dict[str, Any]], bool], timeout: float) -> None:
        """Until ``check(state)`` holds; raises on timeout or when the emulator failed."""
        deadline = time.monotonic() + timeout
        while True:
            self.jsdos.serve()
            state = self.state()
            if check(state):
                return
            if state.get("phase") in {"failed", "exited"}:
                raise self.fail(f"{what}: emulator {state.get('phase')}: {state.get('error', '')}")
            if time.monotonic() > deadline:
                raise self.fail(f"{what}: not after {timeout}s (phase {state.get('phase')!r})")
            time.sleep(POLL)

    # -- the API ---------------------------------------------------------------------------

    def connect(self, url: str, timeout: float = 10.0) -> str:
        """``networkConnect`` to ``ws://`` or ``wss://HOST:PORT/ipx/ROOM``.

        Returns the IPX address the server gave (the registration reply's destination), as
        ``NNNNNNNN:XXXXXXXXXXXX`` (network and node, hex). Raises JsDosError if js-dos gives up
        (it waits about 1.5 s for the reply) or nothing happens within ``timeout``.
        """
        before = len(self.websockets())
        self.evaluate(f"window.jsdos.connect({json.dumps(url)})")
        self.wait(f"connect {url}", lambda s: s.get("net") in {"connected", "failed"}, timeout)
        state = self.state()
        sockets = [ws for ws in state.get("ws", [])[before:] if ws.get("url") == url]
        if state.get("net") != "connected":
            # networkConnect rejects without a reason; DOSBox and js-dos log it.
            said = [
                line
                for line in self.log()
                if "IPX" in line or "connect to" in line or "ws: " in line
            ]
            seen = json.dumps(sockets[-1]) if sockets else "no WebSocket was opened"
            raise self.fail(
                f"connect {url} failed ({state.get('netError')}): {' | '.join(said[-4:])}; "
                f"socket: {seen}"
            )
        frames = sockets[-1].get("receivedFrames", []) if sockets else []
        if not frames or len(frames[0]) < 32:
            raise self.fail(f"connect {url}: connected without a registration reply")
        reply = bytes.fromhex(frames[0])
        return f"{reply[6:10].hex()}:{reply[10:16].hex()}"

    def type(self, command: str, timeout: float = 10.0) -> None:
        """Type ``command`` and Enter at the DOS prompt; returns when the keys are sent."""
        typed = int(self.state().get("typed", 0))
        self.evaluate(f"window.jsdos.type({json.dumps(command + chr(10))})")
        self.wait(
            f"type {command!r}",
            lambda s: int(s.get("typed", 0)) > typed and not s.get("typing"),
            timeout + 0.05 * len(command),
        )

    def read_bytes(self, name: str) -> bytes | None:
        """A file of ``C:`` (``None`` if absent)."""
        value = self.evaluate(f"window.jsdos.read({json.dumps(name)})")
        return None if value is None else base64.b64decode(value)

    def read(self, name: str) -> str:
        """A file a DOS program wrote on ``C:``, CRLF as LF ("" if absent), as DosBox.read."""
        data = self.read_bytes(name)
        return "" if data is None else data.decode(errors="replace").replace("\r\n", "\n")

    def wait_file(self, name: str, timeout: float, *, containing: str = "") -> str:
        """Until ``name`` exists, is not empty, holds ``containing`` and stopped changing.

        DOSBox's files reach the emulator's file system when the DOS program closes them, so
        two equal reads in a row mean the program is done with it.
        """
        deadline = time.monotonic() + timeout
        last: str | None = None
        while True:
            self.jsdos.serve()
            text = self.read(name)
            if text and containing in text and text == last:
                return text
            last = text
            state = self.state()
            if state.get("phase") in {"failed", "exited"}:
                raise self.fail(f"waiting for {name}: emulator {state.get('phase')}")
            if time.monotonic() > deadline:
                raise self.fail(f"{name} not written after {timeout}s (now {text!r})")
            time.sleep(POLL * 2)

    def pause(self) -> None:
        """Stop emulating (about 1 CPU-s per second saved); DOS sees nothing meanwhile."""
        self.evaluate("ci.pause()")

    def resume(self) -> None:
        """Emulate again after ``pause``."""
        self.evaluate("ci.resume()")

    def delete(self, name: str) -> bool:
        """Remove a file of ``C:`` (e.g. a result file before running a program again)."""
        return bool(self.evaluate(f"window.jsdos.remove({json.dumps(name)})"))

    def close(self) -> None:
        """Stop DOSBox (closing its WebSocket) and close the tab."""
        if self.closed:
            return
        self.closed = True
        # A tab or browser that stopped answering must not stop the others' clean-up.
        with contextlib.suppress(RuntimeError, queue.Empty):
            self.evaluate(
                "Promise.race([window.jsdos.exit(), new Promise(r => setTimeout(r, 2000))])"
            )
        with contextlib.suppress(RuntimeError, queue.Empty):
            self.jsdos.browser.call(
                "Target.closeTarget", {"targetId": self.target_id}, session=None
            )


class JsDos:
    """One headless Chromium (run through ``wrap``, e.g. into a namespace); one tab per emulator.

    ``ca_cert``: a PEM CA (or chain) the browser must accept for ``wss://``.
    """

    def __init__(
        self,
        wrap: Callable[..., list[str]],
        workdir: Path,
        *,
        ca_cert: Path | None = None,
        cycles: str = "fixed 3000",
    ) -> None:
        if not (DIST / "emulators.js").is_file() or not (DIST / "wdosbox.wasm").is_file():
            raise JsDosError(f"js-dos's emulator is not installed in {DIST}: run `{NPM_CI}`")
        self.cycles = cycles
        self.emulators: list[Emulator] = []
        self._seen = 0
        # Every emulator's tab must run at full speed, not as a throttled background tab.
        extra = [*UNTHROTTLED, *(ca_flags(ca_cert) if ca_cert is not None else [])]
        workdir.mkdir(parents=True, exist_ok=True)
        # cdp.Browser's command line ends in the start URL; Chromium takes switches after it.
        self.browser = Browser(lambda *cmd: wrap(*cmd, *extra), workdir / "chromium-jsdos")
        try:
            self.browser.call(
                "Fetch.enable",
                {"patterns": [{"urlPattern": f"{ORIGIN}/*", "requestStage": "Request"}]},
                session=None,
            )
            self._allow_local_network()
        except BaseException:
            self.browser.close()
            raise

    def _allow_local_network(self) -> None:
        """Let the page open WebSockets to loopback and private addresses.

        A page the harness serves has no IP address, so Chromium's Local Network Access
        counts it as public and blocks its WebSocket to 127.0.0.1 or 10.x
        (net::ERR_BLOCKED_BY_LOCAL_NETWORK_ACCESS_CHECKS) unless the origin holds the
        permission: "local-network-access" until Chromium 141 or so, then "local-network"
        and "loopback-network". Each is granted where this Chromium knows it.
        """
        for name in LOCAL_NETWORK_PERMISSIONS:
            with contextlib.suppress(RuntimeError):  # unknown to this Chromium
                self.browser.call(
                    "Browser.setPermission",
                    {"permission": {"name": name}, "setting": "granted", "origin": ORIGIN},
                    session=None,
                )

    def serve(self) -> None:
        """Answer the requests the tabs (and their workers) made for ``ORIGIN``."""
        events = self.browser.events
        while self._seen < len(events):
            event = events[self._seen]
            self._seen += 1
            if event.get("method") == "Log.entryAdded":
                for emu in self.emulators:
                    if emu.session == event.get("sessionId"):
                        entry = event["params"]["entry"]
                        emu.browser_log.append(f"{entry.get('level')}: {entry.get('text')}")
                        del emu.browser_log[:-LOG_TAIL]
            if event.get("method") != "Fetch.requestPaused" or "sessionId" in event:
                continue
            params = event["params"]
            status, headers, body = self._file(params["request"]["url"])
            self.browser.call(
                "Fetch.fulfillRequest",
                {
                    "requestId": params["requestId"],
                    "responseCode": status,
                    "responseHeaders": [{"name": k, "value": v} for k, v in headers.items()],
                    "body": base64.b64encode(body).decode(),
                },
                session=None,
            )
        # Nothing else reads the events: keep the list short.
        if self._seen > 1000 and self._seen == len(events):
            del events[: self._seen]
            self._seen = 0

    @staticmethod
    def _file(url: str) -> tuple[int, dict[str, str], bytes]:
        path = url[len(ORIGIN) :].split("?", 1)[0].split("#", 1)[0].lstrip("/")
        target = (HERE / path).resolve()
        if HERE not in target.parents or not target.is_file():
            return 404, {"Content-Type": "text/plain"}, f"not found: {path}".encode()
        content_type = CONTENT_TYPES.get(target.suffix, "application/octet-stream")
        return 200, {"Content-Type": content_type, "Cache-Control": "no-store"}, target.read_bytes()

    def emulator(
        self,
        programs: Path | None = None,
        *,
        files: Mapping[str, bytes] | None = None,
        timeout: float = 30.0,
    ) -> Emulator:
        """A new tab with DOSBox booted to its prompt on ``C:``.

        ``programs``: a directory whose files (the ``.COM`` programs of dosprog.assemble) are
        copied to ``C:``; ``files``: more, by name.
        """
        init: dict[str, bytes] = {}
        if programs is not None:
            for item in sorted(programs.iterdir()):
                if item.is_file():
                    init[item.name.upper()] = item.read_bytes()
        init.update(files or {})
        target_id = self.browser.call(  # a window each: every tab is a visible one
            "Target.createTarget", {"url": PAGE, "newWindow": True}, session=None
        )["targetId"]
        session = self.browser.call(
            "Target.attachToTarget", {"targetId": target_id, "flatten": True}, session=None
        )["sessionId"]
        emu = Emulator(self, f"emulator {len(self.emulators) + 1}", target_id, session)
        self.emulators.append(emu)
        self.browser.call("Log.enable", session=session)
        emu.wait("page load", lambda s: s.get("phase") in {"loaded", "failed"}, timeout)
        listing = [
            {"path": name, "b64": base64.b64encode(data).decode()} for name, data in init.items()
        ]
        emu.evaluate(
            f"window.jsdos.start({json.dumps(dosbox_conf(self.cycles))}, {json.dumps(listing)})"
        )
        emu.wait("DOSBox start", lambda s: s.get("phase") == "running", timeout)
        emu.wait_file(BOOT_MARK, timeout)
        return emu

    def close(self) -> None:
        """Close every tab, then the browser."""
        for emu in self.emulators:
            emu.close()
        self.browser.close()
