"""Widgets: they render the core objects' state and emit what the user asked for; no logic."""
