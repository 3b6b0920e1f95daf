"""Thin, impure I/O: sockets, netlink, nft and timers around the pure policy.

Reports through the plain counters of ``obs.counters``; never imports the exposition.
"""
