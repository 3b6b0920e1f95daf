"""The table of known DirectPlay games, shipped as package data and extensible from config."""

from collections.abc import Mapping
from importlib import resources
from types import MappingProxyType
from uuid import UUID

import yaml


def parse_guid(text: str) -> UUID:
    """Parse a Windows-form GUID such as ``{76F93801-9340-11D2-AE34-00600895C779}``.

    Raises:
        ValueError: not a GUID.
    """
    return UUID(text.strip().strip("{}"))


def builtin_games() -> dict[UUID, str]:
    """The GUID table in ``ipxbridge/data/games.yaml``."""
    text = resources.files("ipxbridge").joinpath("data/games.yaml").read_text(encoding="utf-8")
    raw = yaml.safe_load(text) or {}
    return {parse_guid(str(k)): str(v) for k, v in raw.items()}


def game_table(extra: Mapping[str, str] | None = None) -> Mapping[UUID, str]:
    """Built-in titles overlaid with ``extra`` (GUID text -> title) from the configuration."""
    table = builtin_games()
    for guid, title in (extra or {}).items():
        table[parse_guid(guid)] = title
    return MappingProxyType(table)
