"""Errors that reach the user. Each message says what was wrong and how to fix it."""


class FleetguiError(Exception):
    """A failure the user can act on; the CLI prints its message without a traceback."""
