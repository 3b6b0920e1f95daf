"""Pure decisions; the clock is always passed in.

The IPX switch, loop and duplicate filters, the reflection limit, the relay plan and its rules,
the flow table, fair queues, DirectPlay inspection, reassembly and the session list.
"""
