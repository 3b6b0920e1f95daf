"""Pure decisions: switching, duplicate suppression. The clock is always passed in."""
