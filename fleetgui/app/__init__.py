"""The Qt desktop application: widgets and their adapters over the core."""
