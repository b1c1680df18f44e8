"""Device and model profiles and the layer-to-device assignment solver (pure functions)."""
