#!/bin/sh
# ipxbridge container entrypoint (POSIX sh; dash in the image).
#
# Run the image with host networking and only the capabilities it needs:
#
#   docker run -d --name ipxbridge --network host \
#     --cap-drop ALL --cap-add NET_BIND_SERVICE --cap-add NET_RAW \
#     --cap-add SETUID --cap-add SETGID \
#     --security-opt no-new-privileges:true --read-only --tmpfs /tmp \
#     -v /etc/ipxbridge/config.yaml:/etc/ipxbridge/config.yaml:ro \
#     -v ipxbridge-state:/var/lib/ipxbridge \
#     ipxbridge
#
# Add --cap-add NET_ADMIN for the nftables kernel fast path (relay.fast_path).
#
# Each capability is needed because:
#   NET_BIND_SERVICE  UDP 213 (and the HTTP or browser players' port, if set below 1024).
#                     With --network host the host's net.ipv4.ip_unprivileged_port_start
#                     (1024) applies.
#   NET_RAW           relay source mode "preserve" (raw IP_HDRINCL copies keep the player's
#                     address). This is optional in mode "auto", which falls back to
#                     "rewrite" without it. IPX "ethernet" interface ports (native IPX
#                     frames, ipx.interfaces / --ipx-iface) need it too: an AF_PACKET socket
#                     per interface, which also puts the interface in promiscuous mode while
#                     the bridge runs (the kernel undoes it when the socket closes; no
#                     NET_ADMIN needed). Without it those ports stay closed and the bridge
#                     logs why; its other ports work.
#   SETUID, SETGID    let this script switch to uid/gid 10001 with setpriv. They are not
#                     passed on to the bridge.
#   NET_ADMIN         optional: the nftables fast path, and reading kernel WireGuard peers.
#
# What it does, started as root (the image default):
#   1. For `run`, it works out which capabilities the configuration needs: the IPX, HTTP
#      and browser players' ports (e.g. from --ipx-listen, IPXBRIDGE_IPX__LISTEN or
#      ipx.listen in the --config file; likewise --metrics-listen, --ws-listen),
#      the source mode, the fast path, and whether there are IPX interface ports (NET_RAW
#      is then kept if given, whatever the source mode). It compares them with the
#      capabilities the container was given (CapEff and CapBnd in /proc/self/status). If
#      one is missing it prints ONE line naming the `--cap-add` flags to add, and exits 2.
#      Without this check, setpriv would fail later with a cryptic message.
#   2. exec setpriv: switch to uid/gid 10001 with no supplementary groups (--clear-groups
#      works without a passwd entry, unlike --init-groups) and set no_new_privs. Only the
#      capabilities that are present and useful are kept, as inheritable and ambient
#      capabilities, so the unprivileged Python process has them in its effective set.
#      The bounding set is cut down too when CAP_SETPCAP is available (with
#      --cap-drop ALL it is not, and no_new_privs already stops regaining them).
#   3. Without NET_ADMIN, exec: ipxbridge itself becomes PID 1. It installs SIGTERM/SIGINT
#      handlers (clean stop) and a SIGHUP handler (reload), so `docker stop` works without an
#      init.
#   3'. With NET_ADMIN the bridge may leave kernel state: the fast path's nftables table
#      outlives a bridge that is killed, keeps copying broadcasts with no bridge, and on the
#      host's network doubles every broadcast of the next, Python-path bridge (docs/reliability.md
#      R18). So this script stays PID 1 as a supervisor. It steps down to uid 10001 itself
#      first, keeping NET_ADMIN for `ipxbridge cleanup` (as root without CAP_KILL it could
#      not signal a uid 10001 bridge). It runs cleanup, starts the bridge as its child
#      without NET_ADMIN unless the fast path wants it, passes SIGTERM, SIGINT and SIGHUP on,
#      waits for the bridge to exit however it exits (an OOM kill included), runs cleanup
#      again and exits with the bridge's status. Only a SIGKILL of the whole container
#      skips the second cleanup; the next start's cleanup (and the bridge's own) covers it.
# Other subcommands (check-config, version, sessions, interfaces, decode...) are
# passed through unchanged, with no capability checks.
# Started as non-root (docker run --user ...), it just execs ipxbridge. In that case the
# bridge cannot bind port 213 unless the host allows unprivileged ports that low.
#
# IPXBRIDGE_EXEC overrides the program that is run (default: `ipxbridge` from PATH).
set -eu

PROG=ipxbridge-entrypoint
EXEC=${IPXBRIDGE_EXEC:-ipxbridge}
RUN_UID=10001
RUN_GID=10001
DEFAULT_PORT=213 # ipxbridge's default when a listen address has no port

# Capability numbers (linux/capability.h).
CAP_SETGID=6
CAP_SETUID=7
CAP_SETPCAP=8
CAP_NET_BIND_SERVICE=10
CAP_NET_ADMIN=12
CAP_NET_RAW=13

say() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() {
    say "$*"
    exit 2
}

supervise() { # supervise SETPRIV_CAPS ARGS...: step 3' above, as uid 10001
    child_caps=$1
    shift
    cleanup() { # its output goes to stderr: stdout stays the bridge's
        "$EXEC" cleanup >&2 || say "cleanup failed (exit $?)"
    }
    child=""
    stop_signal=""
    forward() { # forward SIGNAL: pass it on to the bridge (a stop before it runs is kept)
        if [ -n "$child" ]; then
            kill -s "$1" "$child" 2>/dev/null || true
        elif [ "$1" != HUP ]; then
            stop_signal=$1
        fi
    }
    # PID 1 gets no default action for these: without a trap they would be lost.
    trap 'forward TERM' TERM
    trap 'forward INT' INT
    trap 'forward HUP' HUP
    cleanup
    setpriv --inh-caps="-all$child_caps" --ambient-caps="-all$child_caps" -- "$EXEC" "$@" &
    child=$!
    if [ -n "$stop_signal" ]; then forward "$stop_signal"; fi
    while :; do
        status=0
        wait "$child" || status=$?
        # A trapped signal ends `wait` early (status > 128) while the bridge still runs.
        kill -0 "$child" 2>/dev/null || break
    done
    cleanup
    exit "$status"
}

if [ -n "${IPXBRIDGE_ENTRYPOINT_SUPERVISE+set}" ]; then
    child_caps=$IPXBRIDGE_ENTRYPOINT_SUPERVISE
    unset IPXBRIDGE_ENTRYPOINT_SUPERVISE # the bridge reads IPXBRIDGE_* as configuration
    supervise "$child_caps" "$@"
fi
if [ "$(id -u)" != 0 ]; then
    exec "$EXEC" "$@"
fi
if [ "${1:-}" != run ]; then
    exec "$EXEC" "$@"
fi

# --- capabilities this process holds (effective and in the bounding set) ------------------
cap_eff=0
cap_bnd=0
while IFS=: read -r key value; do
    case $key in
        CapEff) cap_eff=$(printf '%s' "$value" | tr -d ' \t') ;;
        CapBnd) cap_bnd=$(printf '%s' "$value" | tr -d ' \t') ;;
    esac
done </proc/self/status
available=$((0x$cap_eff & 0x$cap_bnd))
has_cap() { [ $(((available >> $1) & 1)) -eq 1 ]; }

# --- the configuration, with ipxbridge's precedence: defaults < file < env < flags ---------
config=""
cli_ipx=""
cli_http=""
cli_ws=""
cli_mode=""
cli_fast=""
cli_ipx_ports=""
parse_args() {
    shift # "run"
    while [ $# -gt 0 ]; do
        case $1 in
            --config) config=${2:-} ;;
            --config=*) config=${1#*=} ;;
            --ipx-listen) cli_ipx=${2:-} ;;
            --ipx-listen=*) cli_ipx=${1#*=} ;;
            --metrics-listen) cli_http=${2:-} ;;
            --metrics-listen=*) cli_http=${1#*=} ;;
            --ws-listen) cli_ws=${2:-} ;;
            --ws-listen=*) cli_ws=${1#*=} ;;
            --source-mode) cli_mode=${2:-} ;;
            --source-mode=*) cli_mode=${1#*=} ;;
            --fast-path) cli_fast=${2:-} ;;
            --fast-path=*) cli_fast=${1#*=} ;;
            --ipx-iface | --ipx-iface=*) cli_ipx_ports=yes ;;
        esac
        shift
    done
}
parse_args "$@"

# yaml_get SECTION KEY: the scalar at SECTION.KEY in the config file (block style, as
# `ipxbridge print-default-config` writes it), or nothing. ipxbridge validates the
# file itself; this only has to find the few values that decide the capabilities.
yaml_get() {
    [ -n "$config" ] && [ -r "$config" ] || return 0
    awk -v sec="$1" -v key="$2" '
        /^[^ \t#][^:]*:/ { cur = $0; sub(/[ \t]*:.*/, "", cur); next }
        cur == sec && $0 ~ ("^[ \t]+" key "[ \t]*:") {
            v = $0
            sub(/^[^:]*:[ \t]*/, "", v)
            sub(/[ \t]+#.*$/, "", v)
            sub(/[ \t]+$/, "", v)
            gsub(/^["\047]|["\047]$/, "", v)
            print v
            exit
        }' "$config"
}
# yaml_has_items SECTION KEY: whether SECTION.KEY in the config file is a list with at least
# one item (a flow list other than [], or block items "- ..." under the key).
yaml_has_items() {
    [ -n "$config" ] && [ -r "$config" ] || return 1
    awk -v sec="$1" -v key="$2" '
        /^[ \t]*(#.*)?$/ { next }
        /^[^ \t#][^:]*:/ { cur = $0; sub(/[ \t]*:.*/, "", cur); inkey = 0; next }
        cur == sec && $0 ~ ("^[ \t]+" key "[ \t]*:") {
            v = $0
            sub(/^[^:]*:[ \t]*/, "", v)
            sub(/[ \t]+#.*$/, "", v)
            gsub(/[ \t]/, "", v)
            if (v == "") { inkey = 1; match($0, /^[ \t]+/); depth = RLENGTH; next }
            found = (v != "[]" && v != "null" && v != "~")
            exit
        }
        inkey {
            match($0, /^[ \t]*/)
            if ($0 ~ /^[ \t]*-/ && RLENGTH >= depth) { found = 1; exit }
            if (RLENGTH <= depth) inkey = 0
        }
        END { exit !found }' "$config"
}
unquote() { printf '%s' "$1" | sed -e 's/^[[:space:]]*["'\'']\{0,1\}//' -e 's/["'\'']\{0,1\}[[:space:]]*$//'; }
setting() { # setting CLI_VALUE ENV_VALUE SECTION KEY DEFAULT
    if [ -n "$1" ]; then
        unquote "$1"
    elif [ -n "$2" ]; then
        unquote "$2"
    else
        v=$(yaml_get "$3" "$4")
        printf '%s' "${v:-$5}"
    fi
}
ipx_listen=$(setting "$cli_ipx" "${IPXBRIDGE_IPX__LISTEN:-}" ipx listen "0.0.0.0:$DEFAULT_PORT")
http_listen=$(setting "$cli_http" "${IPXBRIDGE_HTTP__LISTEN:-}" http listen 127.0.0.1:9213)
ws_listen=$(setting "$cli_ws" "${IPXBRIDGE_WEBSOCKET__LISTEN:-}" websocket listen 0.0.0.0:1900)
source_mode=$(setting "$cli_mode" "${IPXBRIDGE_RELAY__SOURCE_MODE:-}" relay source_mode auto)
fast_path=$(setting "$cli_fast" "${IPXBRIDGE_RELAY__FAST_PATH:-}" relay fast_path auto)
# IPX interface ports (ipx.interfaces): flags replace the environment, which replaces the file.
ipx_ports=""
if [ -n "$cli_ipx_ports" ]; then
    ipx_ports=yes
elif [ -n "${IPXBRIDGE_IPX__INTERFACES+set}" ]; then
    case $(printf '%s' "$IPXBRIDGE_IPX__INTERFACES" | tr -d ' \t') in
        '' | '[]' | null | '~') ;;
        *) ipx_ports=yes ;;
    esac
elif yaml_has_items ipx interfaces; then
    ipx_ports=yes
fi

port_of() { # port_of ADDR[:PORT] [DEFAULT]: the port, nothing for "off"
    case $1 in
        [Oo][Ff][Ff]) ;;
        *:*) printf '%s' "${1##*:}" ;;
        *) printf '%s' "${2:-$DEFAULT_PORT}" ;;
    esac
}
unpriv_start=$(cat /proc/sys/net/ipv4/ip_unprivileged_port_start 2>/dev/null || echo 1024)
case $unpriv_start in '' | *[!0-9]*) unpriv_start=1024 ;; esac
privileged_port() { # privileged_port PORT
    case $1 in '' | *[!0-9]*) return 1 ;; esac
    [ "$1" -lt "$unpriv_start" ]
}

# --- what is required, what is merely useful --------------------------------------------
missing=""
reasons=""
keep=""
require() { # require CAP_NUMBER NAME WHY
    if has_cap "$1"; then
        keep="$keep $2"
    else
        missing="$missing $2"
        reasons="$reasons${reasons:+, }$2 ($3)"
    fi
}
want() { # want CAP_NUMBER NAME: keep it if the container has it
    if has_cap "$1"; then keep="$keep $2"; fi
}

require "$CAP_SETUID" SETUID "to switch to uid $RUN_UID"
require "$CAP_SETGID" SETGID "to switch to gid $RUN_GID"
keep="" # SETUID/SETGID are for this script only, never for the bridge
bind_why=""
ipx_port=$(port_of "$ipx_listen")
http_port=$(port_of "$http_listen")
ws_port=$(port_of "$ws_listen" 1900)
if privileged_port "$ipx_port"; then
    bind_why="IPX port $ipx_port < $unpriv_start"
elif privileged_port "$http_port"; then
    bind_why="HTTP port $http_port < $unpriv_start"
elif privileged_port "$ws_port"; then
    bind_why="browser players' port $ws_port < $unpriv_start"
fi
if [ -n "$bind_why" ]; then
    require "$CAP_NET_BIND_SERVICE" NET_BIND_SERVICE "$bind_why"
fi
case $source_mode in
    preserve) require "$CAP_NET_RAW" NET_RAW "relay source mode preserve" ;;
    rewrite) if [ -n "$ipx_ports" ]; then want "$CAP_NET_RAW" NET_RAW; fi ;;
    *) want "$CAP_NET_RAW" NET_RAW ;;
esac
case $fast_path in
    on) require "$CAP_NET_ADMIN" NET_ADMIN "relay fast path on" ;;
    off) ;;
    *) [ "$source_mode" = rewrite ] || want "$CAP_NET_ADMIN" NET_ADMIN ;;
esac

if [ -n "$missing" ]; then
    flags=""
    for name in $missing; do flags="$flags --cap-add $name"; done
    die "missing capabilities: $reasons; add${flags} to docker run (compose: cap_add)"
fi

if [ -n "$config" ] && [ -e "$config" ] &&
    ! setpriv --reuid="$RUN_UID" --regid="$RUN_GID" --clear-groups -- test -r "$config"; then
    die "config $config is not readable by uid $RUN_UID: make it world-readable (chmod 644) or chown $RUN_UID"
fi

# --- step down ------------------------------------------------------------------------------
caps=""
for name in $keep; do
    caps="$caps,+$(printf '%s' "$name" | tr '[:upper:]' '[:lower:]')"
done
bounding=""
if has_cap "$CAP_SETPCAP"; then
    bounding="--bounding-set=-all$caps"
fi
if has_cap "$CAP_NET_ADMIN"; then
    case "$caps," in
        *,+net_admin,*) supervisor_caps=$caps ;;
        *) supervisor_caps="$caps,+net_admin" ;;
    esac
    if has_cap "$CAP_SETPCAP"; then
        bounding="--bounding-set=-all$supervisor_caps"
    fi
    export IPXBRIDGE_ENTRYPOINT_SUPERVISE="$caps"
    # shellcheck disable=SC2086 # $bounding is one word or nothing
    exec setpriv --reuid="$RUN_UID" --regid="$RUN_GID" --clear-groups --nnp \
        --inh-caps="-all$supervisor_caps" --ambient-caps="-all$supervisor_caps" $bounding \
        -- "$0" "$@"
fi
# No NET_ADMIN, no kernel state to clean up: the bridge itself becomes PID 1.
# shellcheck disable=SC2086 # $bounding is one word or nothing
exec setpriv --reuid="$RUN_UID" --regid="$RUN_GID" --clear-groups --nnp \
    --inh-caps="-all$caps" --ambient-caps="-all$caps" $bounding \
    -- "$EXEC" "$@"
