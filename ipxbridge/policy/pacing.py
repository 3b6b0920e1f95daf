"""When the IPX socket is read: at once, or in timed drains under heavy load.

Interrupt moderation in user space, as a NIC's adaptive receive coalescing and Linux NAPI do
it. Woken per datagram, the bridge pays one event-loop wake-up per packet: about 9 µs of
Python on the 2-core bench machine (asyncio's ``select`` round, the callback's dispatch),
a third of the Python time per packet, and the kernel's cross-CPU wake-ups of each
receiver besides. Under heavy load the bridge instead stops waiting on the socket and drains
it every ``interval`` seconds: each drain reads a batch with one ``recvmmsg``, and the
copies leave in bursts (``docs/benchmarks.md``, "Read coalescing").

What it costs: a packet waits up to ``interval`` (2 ms by default; asyncio's timers add up
to 1 ms) before it is switched, and only while the load lasts; below 2,000 datagrams a
second nothing changes. That is two ticks of DOSBox's own delay: it reads its IPX socket
once per 1 ms timer tick (``docs/protocols.md`` 4.7, "Throughput"), and a DOS game's frame
is 14-70 ms. A bridge that needs the lowest latency under load turns it off
(``ipx.coalesce_ms: 0``). Each timed drain costs about 60 µs on the bench machine (the
loop's timer round and the process's sleep and wake-up), so the interval sets the batch:
1 ms gave 5 datagrams a drain at 4,000 a second, 2 ms gave 10 and 9 % less CPU
(``docs/benchmarks.md``, "Read coalescing").

The rules (the clock is passed in, docs/architecture.md rule 2):

1. Entering. The datagrams read are counted over windows of ``WINDOW`` seconds. When a
   window's rate would fill a drain with ``ENTER_BATCH`` datagrams, timed drains begin.
2. Staying. A drain that finds ``STAY_BATCH`` or more keeps them going.
3. Leaving. A drain that finds nothing ends them at once: the load has stopped, and the next
   packet is read the moment it arrives. ``SMALL_DRAINS`` drains in a row that find fewer
   than ``STAY_BATCH`` end them too, and timed drains are then not tried again for a
   back-off time that doubles up to ``MAX_BACKOFF``. That is a ping-pong exchange: each
   packet waits for the bridge to forward the one before, so a drain never finds more than
   one, and waiting only adds latency. It pays ``SMALL_DRAINS`` intervals once per
   back-off.
"""

from dataclasses import dataclass
from typing import Final

WINDOW: Final = 0.05  # seconds over which the rate is measured
ENTER_BATCH: Final = 4  # datagrams a drain must be expected to find, to begin
STAY_BATCH: Final = 2  # datagrams a drain must find to keep them going
SMALL_DRAINS: Final = 2  # drains in a row under STAY_BATCH that end the timed drains
FIRST_BACKOFF: Final = 0.1  # seconds without timed drains after the first such ending
MAX_BACKOFF: Final = 5.0
# How a read came about, as the books and /metrics label it.
WAKEUP: Final = "wakeup"  # the socket woke the loop
TIMED: Final = "timed"  # a timed drain
READ_MODES: Final = (WAKEUP, TIMED)


@dataclass
class ReadPacer:
    """Decides, after each read of the socket, whether the next one is timed (rules 1-3).

    ``interval`` 0 disables timed drains: every read is a wake-up.
    """

    interval: float
    timed: bool = False
    _window_start: float = 0.0
    _window_count: int = 0
    _small: int = 0
    _backoff: float = FIRST_BACKOFF
    _no_entry_until: float = 0.0

    def woken(self, count: int, now: float) -> bool:
        """A wake-up read ``count`` datagrams; True: stop waiting, drain every interval."""
        self._window_count += count
        elapsed = now - self._window_start
        if elapsed < WINDOW:
            return False
        rate = self._window_count / elapsed
        self._window_start = now
        self._window_count = 0
        if self.interval <= 0 or now < self._no_entry_until:
            return False
        if rate * self.interval >= ENTER_BATCH:  # rule 1
            self.timed = True
            self._small = 0
        return self.timed

    def drained(self, count: int, now: float) -> bool:
        """A timed drain read ``count`` datagrams; True: drain again after ``interval``."""
        if self.interval <= 0:  # turned off by a reload
            return self._leave(now, backoff=False)
        if count >= STAY_BATCH:  # rule 2
            self._small = 0
            self._backoff = FIRST_BACKOFF
            return True
        if count == 0:  # rule 3: the load stopped
            return self._leave(now, backoff=False)
        self._small += 1
        if self._small < SMALL_DRAINS:
            return True
        return self._leave(now, backoff=True)  # rule 3: a ping-pong

    def _leave(self, now: float, *, backoff: bool) -> bool:
        self.timed = False
        self._small = 0
        self._window_start = now
        self._window_count = 0
        if backoff:
            self._no_entry_until = now + self._backoff
            self._backoff = min(self._backoff * 2, MAX_BACKOFF)
        return False

    def retune(self, interval: float) -> None:
        """A new interval (a reload); 0 ends timed drains at the next drain."""
        self.interval = interval
