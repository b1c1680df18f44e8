"""`python -m fleetgui` is the same as the `fleetgui` command."""

from fleetgui.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
