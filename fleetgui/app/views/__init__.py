"""Widgets: they render the core objects' state and emit what the user asked for; no logic. The
presenters (``*_presenter.py``) are not widgets: they only wire a tab's widgets to the core."""
