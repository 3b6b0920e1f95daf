"""SIGHUP: which settings can change on a running bridge, and which keep their running value."""

from typing import Any, Final

from ipxbridge.config import Config

# Settings that need new sockets or tasks: a reload reports them and keeps the running values.
RESTART_ONLY: Final = (
    ("ipx", "listen"),
    ("ipx", "node_assignment"),  # nodes already assigned must stay what clients hold
    ("ipx", "node_key_file"),
    ("http", "listen"),
    ("relay", "ports"),
    ("relay", "source_mode"),
    ("relay", "fast_path"),
    ("relay", "max_flows"),
    ("relay", "max_unproven_flows"),
    ("relay", "max_flows_per_source"),
)


def restart_only_changes(old: Config, new: Config) -> list[str]:
    """Dotted names of settings that differ and cannot change without a restart."""
    changed = [
        f"{section}.{key}"
        for section, key in RESTART_ONLY
        if getattr(getattr(old, section), key) != getattr(getattr(new, section), key)
    ]
    if bool(old.relay.interfaces) != bool(new.relay.interfaces):
        changed.append("relay.interfaces (turning the relay on or off)")
    if (old.directplay.probe_interval > 0) != (new.directplay.probe_interval > 0):
        changed.append("directplay.probe_interval (turning probing on or off)")
    return changed


def keep_restart_only(old: Config, new: Config) -> Config:
    """``new`` with the restart-only settings of ``old`` (what actually runs)."""
    update: dict[str, Any] = {}
    for section, key in RESTART_ONLY:
        update.setdefault(section, {})[key] = getattr(getattr(old, section), key)
    merged = new.model_copy(
        update={
            section: getattr(new, section).model_copy(update=values)
            for section, values in update.items()
        }
    )
    if bool(old.relay.interfaces) != bool(new.relay.interfaces):
        merged = merged.model_copy(
            update={"relay": merged.relay.model_copy(update={"interfaces": old.relay.interfaces})}
        )
    if (old.directplay.probe_interval > 0) != (new.directplay.probe_interval > 0):
        merged = merged.model_copy(
            update={
                "directplay": merged.directplay.model_copy(
                    update={"probe_interval": old.directplay.probe_interval}
                )
            }
        )
    return merged
