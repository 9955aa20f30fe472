"""Source of 53_agentic_learner.svg: ideal trajectories to masked SFT batches, a warm start, an evaluation by episodes, then GRPO on episodes through the chapter-31 loop (run: python 53_agentic_learner_figure.py)."""
from pathlib import Path

import boxes_svg

BOXES = [  # (x, y, w, h, text, highlighted)
    (10, 20, 170, 44, "calculator_trajectory", False),
    (220, 20, 190, 44, "sft_batch: mask 1 on model", True),
    (450, 20, 170, 44, "PeftTrainer (ch. 60)", False),
    (450, 100, 170, 44, "engine.sync_weights", False),
    (220, 100, 190, 44, "greedy episodes (ch. 51)", False),
    (10, 100, 170, 44, "agent_report", True),
    (10, 180, 170, 44, "Orchestrator (ch. 52)", False),
    (220, 180, 190, 44, "trajectory_batch: 2 masks", True),
    (450, 180, 170, 44, "RL loop (ch. 31): GRPO", False),
    (220, 260, 190, 44, "sync, write lock held", False),
]
ARROWS = [((180, 42), (220, 42)), ((410, 42), (450, 42)), ((535, 64), (535, 100)), ((450, 122), (410, 122)),
          ((220, 122), (180, 122)), ((95, 144), (95, 180)), ((180, 202), (220, 202)), ((410, 202), (450, 202)),
          ((535, 224), (410, 270)), ((220, 270), (95, 224))]


def svg() -> str:
    return boxes_svg.svg(BOXES, ARROWS, 630, 315)


if __name__ == "__main__":
    Path(__file__).with_name("53_agentic_learner.svg").write_text(svg())
