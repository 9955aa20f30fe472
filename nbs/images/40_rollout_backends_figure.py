"""Draws nbs/images/40_rollout_backends.svg: the learner talks to one RolloutEngine; engines behind it by name.

    python nbs/images/40_rollout_backends_figure.py      # from the repository root
"""
from pathlib import Path

import boxes_svg

BOXES = [  # (x, y, w, h, text, highlighted)
    (10, 70, 150, 44, "RL learner (ch. 31)", False),
    (200, 70, 150, 44, "RLCluster (ch. 21)", False),
    (390, 60, 190, 64, "RolloutEngine protocol", True),
    (630, 10, 170, 34, "vanilla: our Sampler", False),
    (630, 55, 170, 34, "hf: transformers/torch", False),
    (630, 100, 170, 34, "vllm (ch. 42)", False),
    (630, 145, 170, 34, "sglang_jax (ch. 42)", False),
    (390, 150, 190, 34, "ENGINES registry", False),
]
ARROWS = [((160, 92), (200, 92)), ((350, 92), (390, 92)), ((580, 80), (630, 27)), ((580, 88), (630, 72)),
          ((580, 100), (630, 117)), ((580, 110), (630, 162)), ((485, 150), (485, 124))]


def svg() -> str:
    return boxes_svg.svg(BOXES, ARROWS, 810, 195)


if __name__ == "__main__":
    Path(__file__).with_name("40_rollout_backends.svg").write_text(svg())
