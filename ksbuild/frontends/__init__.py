"""Frontends: thin visitors that turn user sources into IR functions."""
