"""deploy/config.example.yaml is exactly what ``ipxbridge print-default-config`` prints.

docs/configuration.md calls it the complete reference; a key or a comment changed in one place only
would make it lie.
"""

from pathlib import Path

from ipxbridge.config import DEFAULT_CONFIG_YAML, load_config

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "config.example.yaml"


def test_the_example_is_the_embedded_default() -> None:
    assert EXAMPLE.read_text() == DEFAULT_CONFIG_YAML, (
        "regenerate it: python3 -m ipxbridge print-default-config > deploy/config.example.yaml"
    )


def test_the_example_loads() -> None:
    load_config(EXAMPLE)
