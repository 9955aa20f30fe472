"""Draws nbs/images/41_weight_sync.svg: actor weights -> merge LoRA -> map names -> transform -> cast -> engine.

    python nbs/images/41_weight_sync_figure.py      # from the repository root
"""
from pathlib import Path

import boxes_svg

BOXES = [  # (x, y, w, h, text, highlighted)
    (10, 20, 130, 44, "actor (trainer)", False),
    (170, 20, 130, 44, "merge LoRA", False),
    (330, 20, 150, 44, "map path → name", True),
    (510, 20, 150, 44, "transform, cast", False),
    (690, 20, 150, 44, "engine weights", False),
    (330, 110, 330, 44, "log-prob gap: engine vs actor, every step", True),
]
ARROWS = [((140, 42), (170, 42)), ((300, 42), (330, 42)), ((480, 42), (510, 42)), ((660, 42), (690, 42)),
          ((765, 64), (660, 120)), ((75, 64), (330, 125))]


def svg() -> str:
    return boxes_svg.svg(BOXES, ARROWS, 850, 165)


if __name__ == "__main__":
    Path(__file__).with_name("41_weight_sync.svg").write_text(svg())
