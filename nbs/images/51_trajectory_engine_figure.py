"""Source of 51_trajectory_engine.svg: the loop of one episode and its six endings (run: python 51_trajectory_engine_figure.py)."""
from pathlib import Path

import boxes_svg

BOXES = [  # (x, y, w, h, text, highlighted)
    (10, 20, 140, 40, "env.reset → prompt ids", False),
    (190, 20, 170, 40, "engine.generate (ids in)", True),
    (400, 20, 150, 40, "env.step(turn text)", True),
    (400, 100, 150, 40, "observation ids", False),
    (190, 100, 170, 40, "context += turn, obs", False),
    (590, 20, 170, 40, "SUCCEEDED (done)", False),
    (590, 70, 170, 30, "ENV_TIMEOUT / FAILED", False),
    (10, 170, 750, 34, "limits checked each turn: MAX_STEPS_REACHED · MAX_CONTEXT_LIMIT_REACHED · TIMEOUT", False),
]
ARROWS = [((150, 40), (190, 40)), ((360, 40), (400, 40)), ((475, 60), (475, 100)), ((400, 120), (360, 120)),
          ((275, 100), (275, 60)), ((550, 40), (590, 40)), ((550, 55), (590, 80)), ((275, 140), (275, 170))]


def svg() -> str:
    return boxes_svg.svg(BOXES, ARROWS, 770, 212)


if __name__ == "__main__":
    Path(__file__).with_name("51_trajectory_engine.svg").write_text(svg())
