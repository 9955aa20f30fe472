"""Source of 63_dpo.svg: preference pairs through the policy and a frozen reference (run: python 63_dpo_figure.py)."""
from pathlib import Path

import boxes_svg

BOXES = [  # (x, y, w, h, text, highlighted)
    (10, 20, 190, 44, "pairs: prompt, chosen, rejected", False),
    (10, 120, 190, 44, "encode_preference_pairs (text)", False),
    (260, 10, 170, 40, "reference (frozen)", False),
    (260, 75, 170, 40, "policy (trains)", False),
    (490, 10, 160, 40, "Σ log π_ref per response", False),
    (490, 75, 160, 40, "Σ log π per response", False),
    (260, 150, 170, 44, "loss: DPO | IPO | ORPO", True),
    (490, 150, 160, 44, "PeftTrainer step (ch. 60)", False),
]
ARROWS = [((105, 120), (105, 64)), ((200, 35), (260, 30)), ((200, 50), (260, 92)), ((430, 30), (490, 30)),
          ((430, 95), (490, 95)), ((570, 50), (400, 150)), ((570, 115), (420, 150)), ((430, 172), (490, 172))]


def svg() -> str:
    return boxes_svg.svg(BOXES, ARROWS, 660, 205)


if __name__ == "__main__":
    Path(__file__).with_name("63_dpo.svg").write_text(svg())
