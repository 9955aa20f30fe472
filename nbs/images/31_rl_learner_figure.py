"""Source of 31_rl_learner.svg: one global step of the RL loop (run: python 31_rl_learner_figure.py)."""
from pathlib import Path

import boxes_svg

BOXES = [  # (x, y, w, h, text, highlighted)
    (10, 70, 130, 44, "dataset: Bf prompts", False),
    (190, 20, 220, 40, "producer thread (this chapter)", True),
    (190, 70, 220, 40, "make_experience (ch. 32, 33)", False),
    (190, 120, 220, 40, "rollout engine + cluster (ch. 21, 40)", False),
    (470, 70, 150, 44, "bounded queue", True),
    (680, 20, 220, 40, "consumer: μ updates / mini-batch", True),
    (680, 70, 220, 40, "RLTrainer on PeftTrainer (ch. 60)", False),
    (680, 120, 220, 40, "sync_rollout: one per global step", True),
    (680, 190, 220, 40, "metrics, eval, checkpoint", False),
]
ARROWS = [((140, 92), (190, 90)), ((410, 90), (470, 92)), ((620, 92), (680, 40)), ((790, 60), (790, 70)),
          ((790, 110), (790, 120)), ((680, 140), (410, 140)), ((790, 160), (790, 190)), ((300, 60), (300, 70)),
          ((300, 110), (300, 120))]


def svg() -> str:
    return boxes_svg.svg(BOXES, ARROWS, 910, 240)


if __name__ == "__main__":
    Path(__file__).with_name("31_rl_learner.svg").write_text(svg())
