"""Source of 64_distillation.svg: a frozen teacher's softened logits as the student's target (run: python 64_distillation_figure.py)."""
from pathlib import Path

import boxes_svg

BOXES = [  # (x, y, w, h, text, highlighted)
    (10, 60, 160, 44, "batch: tokens, loss_mask", False),
    (230, 10, 170, 40, "teacher (frozen)", False),
    (230, 110, 170, 40, "student (trains)", False),
    (460, 10, 190, 40, "softmax(t / T)", False),
    (460, 110, 190, 40, "softmax(s / T), CE on data", False),
    (460, 170, 190, 44, "α·T²·KL + (1 − α)·CE", True),
    (230, 170, 170, 44, "PeftTrainer step (ch. 60)", False),
]
ARROWS = [((170, 75), (230, 30)), ((170, 90), (230, 130)), ((400, 30), (460, 30)), ((400, 130), (460, 130)),
          ((555, 50), (555, 110)), ((555, 150), (555, 170)), ((460, 192), (400, 192))]


def svg() -> str:
    return boxes_svg.svg(BOXES, ARROWS, 660, 225)


if __name__ == "__main__":
    Path(__file__).with_name("64_distillation.svg").write_text(svg())
