"""Container HEALTHCHECK for ipxbridge, using only the standard library (slim has no curl).

It exits 0 when ``/-/healthy`` answers 200 and 1 otherwise. The bridge answers 503 when
its event loop's heartbeat is stale; a refused connection, a timeout or a bad URL also
count as unhealthy. Docker reserves exit code 2, so it is never used here.

The URL is ``http://127.0.0.1:9213/-/healthy``, which is ipxbridge's default
``http.listen``. With host networking that is the host's loopback. If you move the HTTP
API, set ``IPXBRIDGE_HEALTHCHECK_URL``. With ``http.listen: off`` there is nothing to
ask, so disable the healthcheck.
"""

import os
import sys
import urllib.error
import urllib.request

DEFAULT_URL = "http://127.0.0.1:9213/-/healthy"
TIMEOUT = 2.5  # seconds; Docker's --timeout=3s kills us at 3


def check(url: str, timeout: float = TIMEOUT) -> tuple[bool, str]:
    """Ask ``url`` once and return (healthy, reason)."""
    if not url.startswith(("http://", "https://")):
        return False, f"not an http(s) URL: {url!r}"
    # No proxies: an HTTP(S)_PROXY in the container's environment must not reroute loopback.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as resp:
            status = int(resp.status)
    except urllib.error.HTTPError as exc:  # 503 and other non-2xx answers
        return False, f"{url}: HTTP {exc.code}"
    except (OSError, ValueError) as exc:  # refused, timed out, unresolvable, malformed
        return False, f"{url}: {exc}"
    if status != 200:
        return False, f"{url}: HTTP {status}"
    return True, f"{url}: HTTP 200"


def main() -> int:
    """Return the exit status for Docker: 0 healthy, 1 unhealthy."""
    healthy, reason = check(os.environ.get("IPXBRIDGE_HEALTHCHECK_URL", DEFAULT_URL))
    print(("healthy: " if healthy else "unhealthy: ") + reason, file=sys.stderr)
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
