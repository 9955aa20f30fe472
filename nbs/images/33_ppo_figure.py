"""Source of 33_ppo.svg: one PPO step, the critic beside the policy (run: python 33_ppo_figure.py)."""
from pathlib import Path

import boxes_svg

BOXES = [  # (x, y, w, h, text, highlighted)
    (10, 20, 110, 40, "prompts", False),
    (150, 20, 130, 40, "rollout (ch. 40)", False),
    (310, 20, 130, 40, "score [B]", False),
    (150, 90, 170, 40, "old / ref log-probs", False),
    (150, 150, 170, 40, "critic values V(s_t)", True),
    (350, 90, 200, 40, "token rewards → GAE", True),
    (580, 60, 140, 40, "actor: clipped loss", False),
    (580, 130, 140, 40, "critic: value loss", True),
]
ARROWS = [((120, 40), (150, 40)), ((280, 40), (310, 40)), ((215, 60), (225, 90)), ((140, 50), (150, 165)),
          ((375, 60), (420, 90)), ((320, 110), (350, 110)), ((320, 165), (380, 130)), ((550, 105), (580, 85)),
          ((550, 115), (580, 145))]


def svg() -> str:
    return boxes_svg.svg(BOXES, ARROWS, 730, 205)


if __name__ == "__main__":
    Path(__file__).with_name("33_ppo.svg").write_text(svg())
