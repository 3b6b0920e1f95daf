"""Atheris fuzz target for the DirectPlay codec (``ipxbridge.wire.directplay``). Not run in CI.

What it checks, for every input:

* each parser (``parse_dplay`` with and without DP8 context, ``parse_dp4`` with and without SP
  header, ``parse_dp4_player``, the DP8 parsers, the player records, ``split_dp4_stream``)
  returns or raises ``DPlayError`` with a reason from ``DPLAY_REASONS``; any other exception
  is a bug and crashes the fuzzer;
* when a parse succeeds on a layout-preserving format, re-encoding gives the input back (DP4
  messages, player messages, DP8 frames and queries, PACKEDPLAYER / SUPERPACKEDPLAYER
  prefixes), and a DP8 EnumResponse re-encodes to a fixed point.

Usage (from the repository root)::

    pip install atheris
    python tests/fuzz/fuzz_directplay.py --write-seeds fuzz-corpus   # vectors as seeds
    python tests/fuzz/fuzz_directplay.py fuzz-corpus -atheris_runs=2000000 -max_len=2048
    python tests/fuzz/fuzz_directplay.py crash-<sha1>                # replay one input

Without atheris, ``python tests/fuzz/fuzz_directplay.py --smoke [N]`` runs the same checks on
the seeds and N random mutations of them (default 20000) with a fixed random seed.

The file name does not match ``test_*.py``, so pytest never collects it.
"""

import importlib
import random
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))


def check(data: bytes) -> None:
    """The fuzz property for one input (module docstring)."""
    from ipxbridge.wire import directplay as dp  # imported under instrumentation

    def attempt(parse: Callable[[bytes], object]) -> object | None:
        try:
            return parse(data)
        except dp.DPlayError as exc:
            if exc.reason not in dp.DPLAY_REASONS:
                raise
            return None

    attempt(dp.parse_dplay)
    attempt(lambda d: dp.parse_dplay(d, dp8_context=True))
    attempt(dp.parse_session_desc)
    attempt(dp.parse_winsock_sp_data)
    attempt(dp.split_dp4_stream)
    for msg in (
        attempt(dp.parse_dp4),
        attempt(lambda d: dp.parse_dp4(d, bare=True)),
        attempt(dp.parse_dp4_player),
    ):
        if isinstance(msg, dp.DP4Message):
            assert dp.build_dp4_message(msg) == data
    frame = attempt(dp.parse_dp8_frame)
    if isinstance(frame, dp.DP8Frame):
        assert dp.build_dp8_frame(frame) == data
    query = attempt(dp.parse_dp8_enum_query)
    if isinstance(query, dp.DP8EnumQuery):
        assert dp.build_dp8_enum_query(query) == data
    response = attempt(dp.parse_dp8_enum_response)
    if isinstance(response, dp.DP8EnumResponse):
        assert dp.parse_dp8_enum_response(dp.build_dp8_enum_response(response)) == response
    player = attempt(dp.parse_packed_player)
    if isinstance(player, dp.PackedPlayer):
        assert data.startswith(dp.build_packed_player(player))
    spp = attempt(dp.parse_super_packed_player)
    if isinstance(spp, tuple):
        record, used = spp
        assert dp.build_super_packed_player(record) == data[:used]


def seeds() -> list[bytes]:
    """The shared vectors, plus the IPX payloads of the two IPX vectors."""
    from tests.unit.vectors import load_vectors

    vectors = load_vectors()
    found = [v.data for v in vectors.values()]
    return [*found, vectors["c"].data[30:], vectors["c2"].data[30:]]


def smoke(runs: int) -> None:
    rng = random.Random(1234)
    corpus = seeds()
    for seed in corpus:
        check(seed)
    for _ in range(runs):
        data = bytearray(rng.choice(corpus))
        for _ in range(rng.randint(1, 4)):
            where = rng.randrange(len(data) + 1)
            roll = rng.random()
            if roll < 0.4 and data:
                data[min(where, len(data) - 1)] = rng.randrange(256)
            elif roll < 0.7:
                data[where : where + 4] = rng.randrange(1 << 32).to_bytes(4, "little")
            elif roll < 0.85:
                del data[where:]
            else:
                data[where:where] = rng.randbytes(rng.randint(1, 8))
        check(bytes(data))
    print(f"smoke: {len(corpus)} seeds and {runs} mutations, no failure")


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["--smoke"]:
        smoke(int(args[1]) if len(args) > 1 else 20_000)
        return
    if args[:1] == ["--write-seeds"]:
        target = Path(args[1])
        target.mkdir(parents=True, exist_ok=True)
        for i, data in enumerate(seeds()):
            (target / f"seed-{i:02d}").write_bytes(data)
        return
    atheris = importlib.import_module("atheris")  # optional; not a project dependency
    with atheris.instrument_imports():
        importlib.import_module("ipxbridge.wire.directplay")
    atheris.Setup(sys.argv, check)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
