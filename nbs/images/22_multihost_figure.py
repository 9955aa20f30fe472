"""Source of 22_multihost.svg: one program launched N times, joined by initialize() into one mesh (run: python 22_multihost_figure.py)."""
from pathlib import Path

import boxes_svg

BOXES = [  # (x, y, w, h, text, highlighted)
    (5, 95, 190, 40, "launch: pod, SLURM, launch_local", True),
    (245, 25, 210, 40, "process 0: devices 0–3, rows 0–7", False),
    (245, 95, 210, 40, "initialize(): meet at process 0", True),
    (245, 165, 210, 40, "process 1: devices 4–7, rows 8–15", False),
    (515, 25, 190, 40, "is_writer(): logs, metrics", False),
    (515, 95, 190, 40, "one mesh over 8 devices", False),
    (515, 165, 190, 40, "checkpoint: each its shards", False),
]
ARROWS = [((180, 105), (245, 50)), ((180, 125), (245, 180)), ((335, 65), (335, 95)), ((335, 165), (335, 135)),
          ((440, 45), (515, 45)), ((440, 115), (515, 115)), ((440, 185), (515, 185))]


def svg() -> str:
    return boxes_svg.svg(BOXES, ARROWS, 715, 215)


if __name__ == "__main__":
    Path(__file__).with_name("22_multihost.svg").write_text(svg())
