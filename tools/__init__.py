"""Tooling of the shardwise patch series (see the README)."""
