"""Source of 32_grpo.svg: one GRPO step from prompts to an update (run: python 32_grpo_figure.py)."""
from pathlib import Path

import boxes_svg

BOXES = [  # (x, y, w, h, text, highlighted)
    (10, 20, 120, 40, "prompts ×G", False),
    (160, 20, 130, 40, "rollout (ch. 40)", False),
    (320, 20, 150, 40, "rewards [B·G]", False),
    (500, 20, 170, 40, "group advantages (ch. 30)", False),
    (160, 100, 210, 40, "ref / old log-probs (β > 0, μ > 1)", False),
    (400, 100, 160, 40, "make_experience", True),
    (400, 170, 160, 40, "loss_fn", True),
    (590, 170, 110, 40, "update (ch. 60)", False),
]
ARROWS = [((130, 40), (160, 40)), ((290, 40), (320, 40)), ((470, 40), (500, 40)), ((585, 60), (520, 100)),
          ((225, 60), (250, 100)), ((370, 120), (400, 120)), ((480, 140), (480, 170)), ((560, 190), (590, 190))]


def svg() -> str:
    return boxes_svg.svg(BOXES, ARROWS, 710, 220)


if __name__ == "__main__":
    Path(__file__).with_name("32_grpo.svg").write_text(svg())
