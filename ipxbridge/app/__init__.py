"""The composition root: one service per feature, run by a thin ``Bridge``.

``ipx`` (the IPX switch on its UDP socket), ``relay`` (the broadcast relay: plan, sockets,
kernel fast path), ``directplay`` (the inspector, the game list and the prober) and ``http``
(the API, status page, health and /metrics) each offer ``app.service.Service``; ``bridge``
orders their construction, drives one clock tick, fans a reload out and serves until a
signal. Only this package wires ``io/`` and ``obs/`` to ``policy/`` (docs/architecture.md rule 1).
"""

from ipxbridge.app.bridge import Bridge, serve

__all__ = ["Bridge", "serve"]
