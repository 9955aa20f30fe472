"""Source of 50b_sandbox.svg: one call of run_code, from the caller through the gate to the program, and what wraps it (run: python 50b_sandbox_figure.py)."""
from pathlib import Path

import boxes_svg

BOXES = [  # (x, y, w, h, text, highlighted)
    (10, 20, 130, 44, "run_code (caller)", False),
    (170, 20, 150, 44, "gate: tie, cgroup", True),
    (350, 20, 130, 44, "bubblewrap", False),
    (350, 80, 130, 44, "our bootstrap", False),
    (510, 50, 120, 44, "PID 1: undumpable", True),
    (510, 130, 120, 44, "launcher: rlimits", False),
    (510, 210, 120, 44, "main.py", False),
    (10, 110, 460, 36, "namespaces: mount (explicit view), PID, net, user, IPC, UTS, cgroup", True),
    (10, 160, 460, 36, "seccomp filter (classic BPF), no capabilities, no_new_privs", True),
    (10, 210, 460, 36, "one memory bound: cgroup v2 memory.max, or shares + no memfd", True),
]
ARROWS = [((140, 42), (170, 42)), ((320, 42), (350, 42)), ((320, 52), (350, 96)), ((480, 42), (510, 66)),
          ((480, 102), (510, 76)), ((570, 94), (570, 130)), ((570, 174), (570, 210))]


def svg() -> str:
    return boxes_svg.svg(BOXES, ARROWS, 640, 260)


if __name__ == "__main__":
    Path(__file__).with_name("50b_sandbox.svg").write_text(svg())
