// The page side of tests/integration/jsdos_harness.py: one js-dos emulator (npm `emulators`,
// wasm DOSBox in a worker) per tab. The harness calls window.jsdos.* with Runtime.evaluate and
// polls window.jsdos.state; nothing here waits on the harness, so no call can deadlock while
// the harness is busy serving the page's files.
//
// state.phase: loading -> loaded -> starting -> running (-> exited) or failed.
// state.net:   "" -> connecting -> connected, or failed (state.netError says why).
// state.ws:    one record per WebSocket the emulator opened (a tap on window.WebSocket): the
//              URL, open/close (code, reason), messages counted each way, the first messages.
// state.log:   the last lines of console output, DOSBox's stdout and emulator messages.
"use strict";
(() => {
  const MAX_LOG = 500;
  const KEEP_FRAMES = 6; // first messages kept (hex) each way, per WebSocket
  const KEY_MS = 20; // a key is held this long, and released this long before the next
  const t0 = performance.now();
  const state = {
    phase: "loading",
    error: "",
    version: "",
    net: "",
    netError: "",
    typing: false,
    typed: 0,
    exited: false,
    ws: [],
    log: [],
  };
  let ci = null;

  function stamp() {
    return ((performance.now() - t0) / 1000).toFixed(3);
  }
  function note(kind, text) {
    state.log.push(`${stamp()} ${kind}: ${text}`);
    if (state.log.length > MAX_LOG) state.log.splice(0, state.log.length - MAX_LOG);
  }
  function fail(message) {
    state.phase = "failed";
    state.error = String(message);
    note("failed", state.error);
  }
  function hex(bytes) {
    return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }
  function bytesOf(data) {
    if (data instanceof ArrayBuffer) return new Uint8Array(data);
    if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    return null;
  }
  function fromBase64(text) {
    const raw = atob(text);
    const out = new Uint8Array(raw.length);
    for (let i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
    return out;
  }
  function toBase64(bytes) {
    let raw = "";
    for (let i = 0; i < bytes.length; i += 0x8000) {
      raw += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
    }
    return btoa(raw);
  }

  // Console output of the page (and what the emulator forwards) goes to state.log too.
  for (const level of ["log", "info", "warn", "error", "debug"]) {
    const original = console[level].bind(console);
    console[level] = (...args) => {
      note(level, args.map((a) => (a instanceof Error ? a.stack || a.message : String(a))).join(" "));
      original(...args);
    };
  }
  window.addEventListener("error", (e) => note("uncaught", `${e.message} ${e.filename}:${e.lineno}`));
  window.addEventListener("unhandledrejection", (e) => note("unhandled", String(e.reason)));

  // emulators 8.3.9 opens its IPX WebSocket in this (the main) thread: tap it, so the harness
  // sees the registration reply (its own IPX address), message counts and the close code.
  const NativeWebSocket = window.WebSocket;
  class TappedWebSocket extends NativeWebSocket {
    constructor(url, protocols) {
      super(url, protocols);
      const rec = {
        url: String(url),
        opened: false,
        protocol: "",
        extensions: "",
        error: false,
        closed: false,
        closeCode: null,
        closeReason: "",
        wasClean: null,
        sent: 0,
        received: 0,
        sentFrames: [],
        receivedFrames: [],
        texts: 0,
      };
      this._rec = rec;
      state.ws.push(rec);
      note("ws", `new ${rec.url}`);
      // Registered before the emulator's own listeners, so these run first (the emulator
      // transfers the ArrayBuffer to its worker).
      this.addEventListener("open", () => {
        rec.opened = true;
        rec.protocol = this.protocol;
        rec.extensions = this.extensions;
        note("ws", `open ${rec.url} protocol=${JSON.stringify(this.protocol)} extensions=${JSON.stringify(this.extensions)}`);
      });
      this.addEventListener("message", (e) => {
        const bytes = bytesOf(e.data);
        if (bytes === null) {
          rec.texts++;
          return;
        }
        rec.received++;
        if (rec.receivedFrames.length < KEEP_FRAMES) rec.receivedFrames.push(hex(bytes));
      });
      this.addEventListener("error", () => {
        rec.error = true;
        note("ws", `error ${rec.url}`);
      });
      this.addEventListener("close", (e) => {
        rec.closed = true;
        rec.closeCode = e.code;
        rec.closeReason = e.reason;
        rec.wasClean = e.wasClean;
        note("ws", `close ${rec.url} code=${e.code} reason=${JSON.stringify(e.reason)} clean=${e.wasClean}`);
      });
    }
    send(data) {
      const bytes = bytesOf(data);
      this._rec.sent++;
      if (bytes !== null && this._rec.sentFrames.length < KEEP_FRAMES) this._rec.sentFrames.push(hex(bytes));
      return super.send(data);
    }
  }
  window.WebSocket = TappedWebSocket;

  // js-dos key codes (GLFW numbering): printable ASCII keys are their upper-case code.
  const SHIFT = 340;
  const ENTER = 257;
  const PLAIN = " '-,./0123456789;=[\\]`ABCDEFGHIJKLMNOPQRSTUVWXYZ";
  const SHIFTED = { '"': "'", "_": "-", "<": ",", ">": ".", "?": "/", ":": ";", "+": "=", "{": "[", "|": "\\", "}": "]", "~": "`",
    "!": "1", "@": "2", "#": "3", "$": "4", "%": "5", "^": "6", "&": "7", "*": "8", "(": "9", ")": "0" };
  function keysOf(ch) {
    if (ch === "\n" || ch === "\r") return [ENTER];
    const upper = ch.toUpperCase();
    if (ch >= "a" && ch <= "z") return [upper.charCodeAt(0)];
    if (ch >= "A" && ch <= "Z") return [SHIFT, ch.charCodeAt(0)];
    if (PLAIN.includes(ch)) return [ch.charCodeAt(0)];
    if (ch in SHIFTED) return [SHIFT, SHIFTED[ch].charCodeAt(0)];
    throw new Error(`cannot type ${JSON.stringify(ch)}`);
  }
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  function findFile(node, parts) {
    if (parts.length === 0) return node.nodes === null ? node.name : null;
    for (const child of node.nodes || []) {
      if (child.name.toUpperCase() === parts[0].toUpperCase()) {
        const rest = findFile(child, parts.slice(1));
        if (rest !== null) return parts.length === 1 ? child.name : `${child.name}/${rest}`;
      }
    }
    return null;
  }

  window.jsdos = {
    state,
    fail,
    loaded() {
      if (state.phase !== "loading") return;
      if (typeof window.emulators === "undefined") {
        fail("emulators.js did not define window.emulators");
        return;
      }
      state.version = window.emulators.version;
      state.phase = "loaded";
      note("page", `emulators ${state.version}`);
    },
    // files: [{path, b64}], conf: the text of .jsdos/dosbox.conf. Returns at once.
    start(conf, files) {
      if (state.phase !== "loaded") throw new Error(`start() in phase ${state.phase}`);
      state.phase = "starting";
      const init = [{ path: ".jsdos/dosbox.conf", contents: new TextEncoder().encode(conf) }];
      for (const f of files) init.push({ path: f.path, contents: fromBase64(f.b64) });
      window.emulators.pathPrefix = new URL("node_modules/emulators/dist/", location.href).href;
      window.emulators
        .dosboxWorker(init)
        .then((instance) => {
          ci = instance;
          window.ci = instance;
          const events = ci.events();
          events.onStdout((m) => note("stdout", m));
          events.onMessage((type, ...args) => note(`msg:${type}`, args.map(String).join(" ")));
          events.onExit(() => {
            state.exited = true;
            state.phase = "exited";
            note("emulator", "exit");
          });
          events.onNetworkConnected((type, address) => note("net", `connected ${type} ${address}`));
          events.onNetworkDisconnected((type) => note("net", `disconnected ${type}`));
          state.phase = "running";
          note("emulator", "running");
        })
        .catch((e) => fail(`dosboxWorker: ${e && e.stack ? e.stack : e}`));
    },
    // Returns at once; state.net becomes "connected" or "failed".
    connect(url) {
      if (ci === null) throw new Error(`connect() in phase ${state.phase}`);
      if (state.net === "connecting") throw new Error("connect() while connecting");
      state.net = "connecting";
      state.netError = "";
      note("net", `networkConnect ${url}`);
      ci.networkConnect(0, url).then(
        () => {
          state.net = "connected";
          note("net", "networkConnect resolved");
        },
        (e) => {
          state.net = "failed";
          state.netError = String(e && e.message ? e.message : e);
          note("net", `networkConnect rejected: ${state.netError}`);
        },
      );
    },
    // Types the text (a trailing "\n" is Enter); returns at once, state.typing says when done.
    // Throws before typing anything if a character has no key.
    type(text) {
      if (ci === null) throw new Error(`type() in phase ${state.phase}`);
      if (state.typing) throw new Error("type() while typing");
      const strokes = Array.from(text, keysOf);
      state.typing = true;
      (async () => {
        try {
          for (const keys of strokes) {
            for (const k of keys) ci.sendKeyEvent(k, true);
            await sleep(KEY_MS);
            for (const k of keys.slice().reverse()) ci.sendKeyEvent(k, false);
            await sleep(KEY_MS);
          }
          state.typed++;
        } catch (e) {
          note("type", String(e));
        } finally {
          state.typing = false;
        }
      })();
    },
    // A file of C: (the emulator's /home/web_user), base64, or null when it does not exist.
    async read(path) {
      if (ci === null) throw new Error(`read() in phase ${state.phase}`);
      const parts = path.replace(/\\/g, "/").split("/").filter((p) => p !== "");
      const name = findFile(await ci.fsTree(), parts);
      if (name === null) return null;
      return toBase64(await ci.fsReadFile(name));
    },
    // Deletes a file of C:; false when it does not exist.
    async remove(path) {
      if (ci === null) throw new Error(`remove() in phase ${state.phase}`);
      const parts = path.replace(/\\/g, "/").split("/").filter((p) => p !== "");
      const name = findFile(await ci.fsTree(), parts);
      return name === null ? false : ci.fsDeleteFile(name);
    },
    async files() {
      if (ci === null) return null;
      return ci.fsTree();
    },
    async exit() {
      if (ci !== null && !state.exited) await ci.exit();
    },
  };
})();
