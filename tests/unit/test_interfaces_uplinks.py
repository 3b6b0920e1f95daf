"""``ipxbridge interfaces`` shows the ipxbox uplinks the configuration asks for (both ends)."""

from pathlib import Path

import pytest

from ipxbridge.commands.interfaces import uplink_lines, uplinks_json
from ipxbridge.config import UPLINK_PASSWORD_ENV, load_config


def test_both_ends_of_the_uplink_protocol_are_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(UPLINK_PASSWORD_ENV, raising=False)
    secret = tmp_path / "uplink.password"
    secret.write_text("sekrit\n")
    conf = tmp_path / "c.yaml"
    conf.write_text(
        f"ipx:\n  uplink_password_file: {secret}\n  uplinks:\n"
        '    - server: "192.0.2.10:10000"\n'
        "      password_env: SITE_B\n"
    )
    doc = uplinks_json(load_config(conf))
    assert doc == {
        "server": {"listen": "0.0.0.0:213", "password": f"password from {secret}"},
        "clients": [{"server": "192.0.2.10:10000", "password": "from $SITE_B"}],
    }
    assert uplink_lines(doc) == [
        f"ipx uplinks, server side: udp 0.0.0.0:213, password from {secret}",
        "ipx uplink -> 192.0.2.10:10000 (client, password from $SITE_B)",
    ]


def test_without_a_password_the_server_side_is_said_to_be_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(UPLINK_PASSWORD_ENV, raising=False)
    conf = tmp_path / "c.yaml"
    conf.write_text("ipx:\n  listen: 0.0.0.0:213\n")
    doc = uplinks_json(load_config(conf))
    assert doc == {"server": None, "clients": []}
    assert uplink_lines(doc) == ["ipx uplinks, server side: off (no ipx.uplink_password_file)"]
    monkeypatch.setenv(UPLINK_PASSWORD_ENV, "from the environment")
    assert uplinks_json(load_config(conf))["server"] == {
        "listen": "0.0.0.0:213",
        "password": f"password from ${UPLINK_PASSWORD_ENV}",
    }
