#!/usr/bin/env bash
# The whole test suite, from a fresh Debian machine: installs what the tests need, then runs
# lint, types, unit and integration tests. Run as root so the network-namespace and DOSBox
# tests run (with CI=true they fail rather than skip when they cannot run).
set -euo pipefail
cd "$(dirname "$0")/.."

# System tools the integration tier drives: real DOSBox clients, iproute2 for namespaces,
# setpriv (util-linux) for capability tests, tshark as an independent decoder, wireguard-go
# for a real userspace VPN, nftables for the relay fast path, promtool (prometheus), and
# headless chromium to look at the status page as a person would; docker-compose, shellcheck
# and systemd-analyze to check the deployment files; podman, buildah, runc and debootstrap to
# build the container image on a local Debian base and run it (tests/integration/
# test_container.py; there is no Docker engine or registry, docker-compose talks to podman).
APT_PACKAGES=(
    dosbox iproute2 util-linux tshark tcpdump wireguard-go wireguard-tools nftables
    prometheus chromium docker-compose shellcheck systemd podman buildah runc debootstrap
)
PYTHON=${PYTHON:-python3}

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
        || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ]; then
        echo "==> apt-get install ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            "${missing[@]}" >/dev/null
    else
        echo "==> not root: cannot install ${missing[*]}; integration tests will skip" >&2
    fi
fi

echo "==> pip install -e .[test]"
"$PYTHON" -m pip install -q --disable-pip-version-check -e '.[test]' 2>&1 \
    | grep -v -e "Running pip as the 'root' user" -e "is ignored: it is neither" || true

echo "==> ruff"
"$PYTHON" -m ruff check ipxbridge tests bench deploy
"$PYTHON" -m ruff format --check ipxbridge tests bench deploy
echo "==> mypy --strict"
"$PYTHON" -m mypy
echo "==> pytest"
exec "$PYTHON" -m pytest -q "$@"
