"""`python -m fleetgui` is the same as the `fleetgui` command."""

from fleetgui.cli import entry

if __name__ == "__main__":
    entry()
