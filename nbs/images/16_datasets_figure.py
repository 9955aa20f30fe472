"""Source of 16_datasets.svg: dataset files and function names into rows and callables (run: python 16_datasets_figure.py)."""
from pathlib import Path

import boxes_svg

BOXES = [  # (x, y, w, h, text, highlighted)
    (10, 10, 200, 40, "sums.jsonl | x.parquet | hf:NAME", False),
    (10, 90, 200, 40, "'module:fn' | 'file.py:fn'", False),
    (260, 10, 170, 40, "load_rows", True),
    (260, 90, 170, 40, "resolve_function", True),
    (480, 10, 180, 40, "require_columns", True),
    (480, 90, 180, 40, "fn(prompts, completions, **cols)", False),
    (260, 160, 400, 40, "a recipe's trainer (chapter 71)", False),
]
ARROWS = [((210, 30), (260, 30)), ((210, 110), (260, 110)), ((430, 30), (480, 30)), ((430, 110), (480, 110)),
          ((570, 50), (500, 160)), ((570, 130), (560, 160))]


def svg() -> str:
    return boxes_svg.svg(BOXES, ARROWS, 670, 210)


if __name__ == "__main__":
    Path(__file__).with_name("16_datasets.svg").write_text(svg())
