"""Scripts run by hand, and the testbed helpers they share with the integration tests.

``harness.py`` (network namespaces, the bridge as a process, DOSBox-protocol clients) and
``cdp.py`` (headless Chromium over the DevTools protocol) serve tests/integration/ and
``status_screenshot.py`` alike; scripts never import tests.
"""
