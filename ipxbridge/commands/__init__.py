"""The ``ipxbridge`` subcommands, one module each.

Every module offers ``add_parser(sub)``, which registers its parser and handler
(``common.add_command``), and ``run(args) -> int``, the handler that returns the exit code.
``cli.py`` only parses and dispatches. A command module imports ``common`` and the layers
below it, never ``cli`` nor another command, and loads heavy modules (the app, pyroute2,
python-pcapng) only when it runs, so ``ipxbridge --help`` stays quick.
"""
