#!/usr/bin/env bash
# Broadcast relay benchmark: ipxbridge against the naive Python relay and the nftables `dup`
# kernel reference, interleaved in one run (shared/bench/bcastbench.py; root; everything runs
# in namespaces the harness creates and deletes). Usage: bench/relay_compare.sh [ROUNDS] [RATES]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bench=${BCASTBENCH_DIR:-$here/../shared/bench}
rounds=${1:-3}
rates=${2:-1000,5000,10000,20000,40000,0}
out=${BENCH_OUT:-/tmp/ipxbridge-bench}
mkdir -p "$out"
exec python3 "$bench/bcastbench.py" compare --name ipxbridge --rounds "$rounds" --rates "$rates" \
  --out "$out" \
  --relay "naive=python3 $bench/naive_pyrelay.py --port {PORT} --id 2 --dev {IN_IF} --dev {OUT_IF}" \
  --relay "ipxbridge=python3 -m ipxbridge run --ipx-listen off --metrics-listen off --iface {IN_IF} --iface {OUT_IF} --relay-port {PORT} --log-level warning" \
  --relay "ipxbridge_python=python3 -m ipxbridge run --ipx-listen off --metrics-listen off --iface {IN_IF} --iface {OUT_IF} --relay-port {PORT} --fast-path off --log-level warning" \
  --relay "nftdup=bash $bench/nft_dup_relay.sh {IN_IF} {OUT_IF} {PORT} {OUT_BCAST}"
