#!/usr/bin/env bash
# The whole test suite, from a fresh Debian or Ubuntu machine: installs what the tests need,
# then runs lint, types, unit and integration tests. Run as root so the network-namespace and
# DOSBox tests run (with CI=true they fail rather than skip when they cannot run).
#
# Python: everything is installed into a virtual environment, .venv in the repository
# (created on the first run, reused after), unless this already runs inside one. Always, and
# not only when the interpreter is externally managed (PEP 668, as Debian's python3 is): the
# suite pins its own ruff and mypy and installs this package in editable mode, which should
# not land in whatever interpreter is first on PATH (pyenv, conda, the system's), and one way
# of doing it behaves the same on every machine. PYTHON=/path/to/python3 picks the interpreter
# the environment is made from (rm -rf .venv to change it later).
#
# Time: the compile, mypy and the pure build's unit tests overlap, then the compiled build's
# test modules run side by side in TEST_WORKERS pytest-xdist workers (5: the tests mostly
# wait on their networks); each step's line says when it began (docs/testbed.md, "Where the
# suite's time goes"). With arguments, pytest runs with them instead (after the install, the
# compile and ruff): scripts/test.sh -x -k relay.
set -euo pipefail
cd "$(dirname "$0")/.."

die() {
    echo "==> FAILED: $*" >&2
    exit 1
}

say() {  # a step, with the seconds since the run began: where the time goes
    echo "==> [$(printf '%4d' "$SECONDS") s] $*"
}

# System tools the integration tier drives: real DOSBox clients, iproute2 for namespaces,
# setpriv (util-linux) for capability tests, tshark as an independent decoder, wireguard-go
# for a real userspace VPN, nftables for the relay fast path, promtool (prometheus), and
# headless chromium to look at the status page as a person would; docker-compose, shellcheck
# and systemd-analyze to check the deployment files; podman, buildah, runc and debootstrap to
# build the container image on a local Debian base and run it (tests/integration/
# test_container.py; there is no Docker engine or registry, docker-compose talks to podman);
# python3-venv so Debian's and Ubuntu's python3 can make the virtual environment; nasm
# assembles the DOS programs the DOSBox listener tests run (tests/integration/dos/); gcc and
# python3-dev let setup.py compile ipxbridge/wire and ipxbridge/policy with mypyc; nginx
# (nginx-light) is the reverse proxy in front of the browser players' listener, and npm
# installs js-dos's emulator for the browser tests (tests/integration/jsdos/).
APT_PACKAGES=(
    dosbox iproute2 util-linux tshark tcpdump wireguard-go wireguard-tools nftables
    prometheus chromium docker-compose shellcheck systemd podman buildah runc debootstrap
    python3-venv nasm openvpn tinc nebula openssl gcc python3-dev nginx-light
)
# Node.js and npm only where they are missing: a machine may have its own (not Debian's).
command -v npm >/dev/null || APT_PACKAGES+=(nodejs npm)
PYTHON=${PYTHON:-python3}
VENV=.venv

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
        || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ]; then
        say "apt-get install ${missing[*]}"
        # One index that cannot be fetched (a mirror down, another architecture's list) must
        # not stop the run: install from the indexes there are, and fail only if that fails.
        if ! apt-get update -qq; then
            echo "==> warning: apt-get update failed (see above); installing from the package" \
                "lists already here" >&2
        fi
        apt_log=$(mktemp)
        if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            "${missing[@]}" >"$apt_log" 2>&1; then
            cat "$apt_log" >&2
            rm -f "$apt_log"
            die "apt-get install ${missing[*]}"
        fi
        rm -f "$apt_log"
    else
        echo "==> not root: cannot install ${missing[*]}; integration tests will skip" >&2
    fi
fi

# js-dos's own emulator (npm "emulators", pinned with its hash in package-lock.json), which the
# browser tests run in Chromium; installed again only when the lock file changed.
JSDOS=tests/integration/jsdos
if ! cmp -s "$JSDOS/package-lock.json" "$JSDOS/node_modules/.installed-lock.json" 2>/dev/null; then
    say "npm ci --prefix $JSDOS"
    npm ci --prefix "$JSDOS" --no-audit --no-fund --loglevel=error \
        || die "npm ci --prefix $JSDOS (js-dos's emulator for the browser tests)"
    cp "$JSDOS/package-lock.json" "$JSDOS/node_modules/.installed-lock.json"
fi

command -v "$PYTHON" >/dev/null || die "no $PYTHON on PATH (set PYTHON=/path/to/python3)"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || die "$("$PYTHON" -V 2>&1) is too old: ipxbridge needs Python 3.11 or newer (set PYTHON=)"
if "$PYTHON" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)'; then
    PY=$PYTHON
    say "Python: the active virtual environment $("$PY" -c 'import sys; print(sys.prefix)')"
else
    if "$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
        how="reused"
    else
        "$PYTHON" -m venv --clear "$VENV" \
            || die "$PYTHON -m venv $VENV (on Debian or Ubuntu: apt-get install python3-venv)"
        how="created from $(command -v "$PYTHON")"
    fi
    PY=$PWD/$VENV/bin/python  # absolute: the pure-build pass runs from another directory
    say "Python: virtual environment $VENV ($how, $("$PY" -V 2>&1))"
    # As if activated: what the test extra installs (hadolint) and any python3 a test starts
    # by name must be this environment's.
    VIRTUAL_ENV=$PWD/$VENV
    PATH=$VIRTUAL_ENV/bin:$PATH
    export VIRTUAL_ENV PATH
fi

say "pip install -e .[test]"
# The dependencies, and this checkout installed editable without compiling (IPXBRIDGE_PURE):
# its extension modules come from the wheel below, so that the run compiles once.
pip_log=$(mktemp)
if ! IPXBRIDGE_PURE=1 "$PY" -m pip install -q --disable-pip-version-check -e '.[test]' \
    >"$pip_log" 2>&1; then
    cat "$pip_log" >&2
    rm -f "$pip_log"
    die "pip install -e .[test] into $("$PY" -c 'import sys; print(sys.prefix)') (see above)"
fi
# pip's notes about configured package locations that do not exist here are noise
sed -e "/' is ignored: it is neither a file nor a directory\.$/d" "$pip_log"
rm -f "$pip_log"

say "ruff"
"$PY" -m ruff check ipxbridge tests bench deploy scripts setup.py
"$PY" -m ruff format --check ipxbridge tests bench deploy scripts setup.py

# Beside the compile (one core: mypyc's C is one translation unit) and then beside the
# compiled pass, which mostly waits on networks, DOSBox, browsers and VPNs (docs/testbed.md,
# "Where the suite's time goes"): mypy, and the unit tests on the pure-Python build. Their
# output is shown, and judged, after the compiled pass. With arguments (one test, say) the
# script runs just pytest on this checkout's build.
side=$(mktemp -d)
trap 'rm -rf "$side"' EXIT
if [ $# -eq 0 ]; then
    (
        # each one's status is written down, and judged after the compiled pass
        rc=0
        "$PY" -m mypy >"$side/mypy.log" 2>&1 || rc=$?
        echo "$rc" >"$side/mypy.rc"
        # A copy of the source without extension modules, imported first (pytest puts the
        # copy's root on sys.path). The tests that patch ipxbridge's own code to inject a
        # fault (marked patches_code) run here only.
        mkdir "$side/pure"
        tar --exclude=./.git --exclude=./.venv --exclude=./build --exclude=./dist --exclude='*.so' \
            --exclude=__pycache__ --exclude=./tests/artifacts -cf - . | tar -xf - -C "$side/pure"
        rc=0
        (cd "$side/pure" && IPXBRIDGE_EXPECT_BUILD=pure "$PY" -m pytest -q -p no:cacheprovider \
            tests/unit) >"$side/pure.log" 2>&1 || rc=$?
        echo "$rc" >"$side/pure.rc"
    ) &
    side_pid=$!
fi

# The build, once: a wheel (setup.py compiles ipxbridge/wire and ipxbridge/policy with mypyc
# where it can), whose extension modules go beside their sources as a compiled editable
# install puts them. The container tests install this same wheel in the image
# (IPXBRIDGE_WHEEL; the Dockerfile's WHEEL argument) instead of compiling it again.
WHEEL_DIR=dist/test-wheel
say "pip wheel . (the compiled build)"
rm -rf "$WHEEL_DIR"
wheel_log=$(mktemp)
# (--no-build-isolation: the test extra installed the build requirements, the same pins)
if ! "$PY" -m pip wheel -v --disable-pip-version-check --no-deps --no-build-isolation \
    -w "$WHEEL_DIR" . >"$wheel_log" 2>&1; then
    cat "$wheel_log" >&2
    rm -f "$wheel_log"
    die "pip wheel . (see above)"
fi
sed -n 's/^ *\(ipxbridge build: \)/\1/p' "$wheel_log"  # compiled, or why not (setup.py)
rm -f "$wheel_log"
# pip built in the tree: what it left in build/ would make the next in-tree build (the
# build tests') skip its compile as up to date
rm -rf build
find ipxbridge -name '*.so' -delete  # no extension module of an older build stays behind
IPXBRIDGE_WHEEL=$(echo "$PWD/$WHEEL_DIR"/ipxbridge-*.whl)
export IPXBRIDGE_WHEEL
"$PY" - "$IPXBRIDGE_WHEEL" <<'EOF'
import sys
import zipfile

with zipfile.ZipFile(sys.argv[1]) as wheel:
    for name in wheel.namelist():
        if name.startswith("ipxbridge/") and name.endswith(".so"):
            wheel.extract(name, ".")
EOF

# Which build that is: compiled with mypyc (ipxbridge/build.py) or, with no C compiler or
# Python headers, pure Python. CI must test the compiled build, which is what the container
# image ships.
BUILD=$("$PY" -c 'from ipxbridge import build; print(build.build())')
say "build: $("$PY" -m ipxbridge --version)"
if [ "$BUILD" != compiled ] && [ "${CI:-}" = true ]; then
    die "the compiled build did not build ($BUILD); setup.py says why: $PY -m pip wheel -v ."
fi

if [ $# -gt 0 ]; then
    say "pytest ($BUILD build)"
    exec "$PY" -m pytest -q "$@"
fi
# The compiled build's modules side by side in pytest-xdist workers (each test in namespaces
# of its own, the longest modules first: tests/conftest.py); then the tests marked "alone",
# which measure rates and need the CPUs to themselves.
status=0
say "pytest on the $BUILD build, ${TEST_WORKERS:-5} workers (mypy and the pure build's" \
    "unit tests beside it)"
IPXBRIDGE_EXPECT_BUILD=$BUILD "$PY" -m pytest -q -n "${TEST_WORKERS:-5}" --dist loadfile \
    --no-loadscope-reorder -m "not patches_code and not alone" --durations=15 || status=$?
wait "$side_pid" || status=$?
say "mypy --strict"
cat "$side/mypy.log"
[ "$(cat "$side/mypy.rc" 2>/dev/null)" = 0 ] || status=1
say "pytest tests/unit on the pure-Python build"
cat "$side/pure.log"
[ "$(cat "$side/pure.rc" 2>/dev/null)" = 0 ] || status=1
say "pytest on the $BUILD build: the tests that run alone"
IPXBRIDGE_EXPECT_BUILD=$BUILD "$PY" -m pytest -q -p no:xdist -m "alone and not patches_code" \
    || status=$?
[ "$status" = 0 ] || die "see above"
