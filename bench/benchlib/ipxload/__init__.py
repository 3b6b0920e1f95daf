"""The IPX tunnel load bench behind ``bench/ipx_bench.py``: ipxbridge against DOSBox's own
IPX server, in a private namespace.

``client`` is the load generator (synthetic DOSBox-protocol clients; it runs as the script's
``_client`` child inside the namespace), ``servers`` starts and stops the server under test and
runs the generator beside it, ``report`` turns the runs into medians, targets and the table.
"""
