"""The commands (relay, sweep, retention, exports) and their arguments."""
