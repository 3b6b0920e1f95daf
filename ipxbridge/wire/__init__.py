"""Pure wire codecs: bytes in, frozen dataclasses out, and back.

Nothing here touches sockets, clocks, logging or metrics (house style rule 1).
"""
