"""Whether Qt can show a window here (``fleetgui.display_check``): no display is a problem on
Linux unless Qt renders offscreen, and the system libraries Qt's xcb plugin lacks are named as
packages."""

from __future__ import annotations

from pathlib import Path

from fleetgui.display_check import display_problem, missing_libraries

LDD_OUTPUT = """\
\tlinux-vdso.so.1 (0x00007ffd)
\tlibxcb-cursor.so.0 => /lib/x86_64-linux-gnu/libxcb-cursor.so.0 (0x00007f37)
\tlibxcb-icccm.so.4 => not found
\tlibxcb-keysyms.so.1 => not found
\tlibxcb-icccm.so.4 => not found
\tlibfoo-unknown.so.7 => not found
"""


def test_no_display_is_a_problem_on_linux_unless_qt_renders_offscreen() -> None:
    problem = display_problem({}, platform="linux", ldd=lambda _: "")
    assert problem is not None and "DISPLAY" in problem
    for qpa in ("offscreen", "minimal", "vnc"):
        assert display_problem({"QT_QPA_PLATFORM": qpa}, platform="linux") is None
    assert display_problem({}, platform="win32") is None
    assert display_problem({"QT_QPA_PLATFORM": "xcb"}, platform="linux", ldd=lambda _: "")


def test_missing_xcb_libraries_are_named_as_packages() -> None:
    assert missing_libraries(LDD_OUTPUT) == [
        "libxcb-icccm.so.4", "libxcb-keysyms.so.1", "libfoo-unknown.so.7",
    ]  # fmt: skip
    problem = display_problem(
        {"DISPLAY": ":0"}, platform="linux", plugin=Path("/x/libqxcb.so"), ldd=lambda _: LDD_OUTPUT
    )
    assert problem is not None
    assert "libxcb-icccm4" in problem and "libxcb-keysyms1" in problem
    assert "libfoo-unknown.so.7" in problem  # no known package: the library itself
    assert "libxcb-cursor0" not in problem  # installed: not blamed
    fine = "\tlibxcb-cursor.so.0 => /lib/libxcb-cursor.so.0 (0x1)\n"
    assert (
        display_problem({"DISPLAY": ":0"}, platform="linux", plugin=Path("/x"), ldd=lambda _: fine)
        is None
    )
