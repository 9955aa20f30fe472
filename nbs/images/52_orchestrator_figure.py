"""Source of 52_orchestrator.svg: episodes under read shares of the sync lock feed the group queue; the learner takes groups and syncs (run: python 52_orchestrator_figure.py)."""
from pathlib import Path

import boxes_svg

BOXES = [  # (x, y, w, h, text, highlighted)
    (10, 20, 130, 40, "task stream", False),
    (180, 10, 190, 28, "episode (read share)", False),
    (180, 44, 190, 28, "episode (read share)", False),
    (180, 78, 190, 28, "… ≤ max_concurrency", False),
    (410, 40, 150, 44, "GroupQueue (G each)", True),
    (600, 40, 140, 44, "learner", False),
    (180, 150, 190, 40, "SyncLock", True),
    (600, 150, 140, 40, "sync (write side)", False),
]
ARROWS = [((140, 40), (180, 24)), ((140, 40), (180, 58)), ((140, 40), (180, 92)), ((370, 24), (410, 55)),
          ((370, 58), (410, 62)), ((370, 92), (410, 70)), ((560, 62), (600, 62)), ((670, 84), (670, 150)),
          ((600, 170), (370, 170)), ((275, 150), (275, 106))]


def svg() -> str:
    return boxes_svg.svg(BOXES, ARROWS, 750, 200)


if __name__ == "__main__":
    Path(__file__).with_name("52_orchestrator.svg").write_text(svg())
