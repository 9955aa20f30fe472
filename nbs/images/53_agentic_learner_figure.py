"""Source of 53_agentic_learner.svg: ideal trajectories to masked SFT batches, a warm start, an evaluation by episodes (run: python 53_agentic_learner_figure.py)."""
from pathlib import Path

import boxes_svg

BOXES = [  # (x, y, w, h, text, highlighted)
    (10, 20, 170, 44, "calculator_trajectory", False),
    (220, 20, 190, 44, "sft_batch: mask 1 on model", True),
    (450, 20, 170, 44, "PeftTrainer (ch. 60)", False),
    (450, 100, 170, 44, "engine.sync_weights", False),
    (220, 100, 190, 44, "greedy episodes (ch. 51)", False),
    (10, 100, 170, 44, "agent_report", True),
]
ARROWS = [((180, 42), (220, 42)), ((410, 42), (450, 42)), ((535, 64), (535, 100)), ((450, 122), (410, 122)),
          ((220, 122), (180, 122))]


def svg() -> str:
    return boxes_svg.svg(BOXES, ARROWS, 630, 155)


if __name__ == "__main__":
    Path(__file__).with_name("53_agentic_learner.svg").write_text(svg())
