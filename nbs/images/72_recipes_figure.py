"""Source of 72_recipes.svg: a recipe's four layers merged, then the objects of a launch in build order (run: python 72_recipes_figure.py)."""
from pathlib import Path

import boxes_svg

BOXES = [  # (x, y, w, h, text, highlighted)
    (10, 10, 150, 34, "package defaults", False),
    (10, 54, 150, 34, "recipe file (+ base:)", False),
    (10, 98, 150, 34, "TUNIX_LIT_S__KEY env", False),
    (10, 142, 150, 34, "key=value (cli)", False),
    (210, 66, 170, 54, "resolve_recipe: OmegaConf + sources", True),
    (430, 10, 220, 30, "mesh, rollout / algorithm configs", False),
    (430, 46, 220, 30, "model, tokenizer, LoRA", False),
    (430, 82, 220, 30, "datasets, rewards, accuracy", False),
    (430, 118, 220, 30, "reference / critic / teacher, cluster", False),
    (430, 154, 220, 30, "optimizer, trainer, checkpoints", False),
    (210, 154, 170, 34, "build -> Launch (--dry-run)", True),
    (210, 204, 170, 34, "run_recipe -> summary.json", True),
]
ARROWS = [((160, 27), (210, 80)), ((160, 71), (210, 88)), ((160, 115), (210, 98)), ((160, 159), (210, 108)),
          ((295, 120), (295, 154)), ((380, 160), (430, 25)), ((380, 165), (430, 169)), ((295, 188), (295, 204))]


def svg() -> str:
    return boxes_svg.svg(BOXES, ARROWS, 660, 250)


if __name__ == "__main__":
    Path(__file__).with_name("72_recipes.svg").write_text(svg())
