"""Pure wire codecs: bytes in, frozen dataclasses out, and back.

Nothing here touches sockets, clocks, logging or metrics (docs/architecture.md rule 1).
"""
