"""Source of 60_peft_trainer.svg: where the trainer sits (run: python 60_peft_trainer_figure.py)."""
from pathlib import Path

import boxes_svg

BOXES = [  # (x, y, w, h, text, highlighted)
    (10, 20, 150, 44, "data: dicts of [B, T]", False),
    (10, 110, 150, 44, "model (ch. 10, 61)", False),
    (220, 55, 200, 64, "PeftTrainer (ch. 60)", True),
    (480, 10, 170, 40, "loss_fn(model, batch, rng)", False),
    (480, 70, 170, 40, "optax via nnx.Optimizer", False),
    (480, 130, 170, 40, "checkpoints (ch. 62)", False),
    (220, 160, 200, 40, "metrics: jsonl, TensorBoard", False),
]
ARROWS = [((160, 42), (220, 75)), ((160, 132), (220, 100)), ((420, 70), (480, 30)), ((420, 87), (480, 90)),
          ((420, 105), (480, 150)), ((320, 119), (320, 160))]


def svg() -> str:
    return boxes_svg.svg(BOXES, ARROWS, 660, 210)


if __name__ == "__main__":
    Path(__file__).with_name("60_peft_trainer.svg").write_text(svg())
