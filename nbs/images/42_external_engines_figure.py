"""Source of 42_external_engines.svg: the actor's weights reach an external engine through a mapping table (run: python 42_external_engines_figure.py)."""
from pathlib import Path

import boxes_svg

BOXES = [  # (x, y, w, h, text, highlighted)
    (10, 10, 170, 40, "actor (trains)", False),
    (10, 90, 170, 44, "actor_params: LoRA merged", False),
    (230, 90, 200, 44, "mapping: name, layout, dtype", True),
    (480, 10, 190, 40, "reset prefix cache, free KV", False),
    (480, 90, 190, 44, "write engine weight state", False),
    (480, 170, 190, 44, "refresh cached leaves, KV", False),
    (230, 170, 200, 44, "generate: ids + log-probs", False),
    (10, 170, 170, 44, "learner step (updates actor)", False),
]
ARROWS = [((95, 50), (95, 90)), ((180, 112), (230, 112)), ((575, 50), (575, 90)), ((430, 112), (480, 112)),
          ((575, 134), (575, 170)), ((480, 192), (430, 192)), ((230, 192), (180, 192))]


def svg() -> str:
    return boxes_svg.svg(BOXES, ARROWS, 680, 225)


if __name__ == "__main__":
    Path(__file__).with_name("42_external_engines.svg").write_text(svg())
