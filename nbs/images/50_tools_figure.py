"""Source of 50_tools.svg: one model turn through parser, tool manager and tools to an observation (run: python 50_tools_figure.py)."""
from pathlib import Path

import boxes_svg

BOXES = [  # (x, y, w, h, text, highlighted)
    (10, 20, 150, 44, "model turn (text)", False),
    (200, 20, 190, 44, "parser: qwen|llama|gemma|tiny", True),
    (430, 20, 200, 44, "ToolManager: name, args, timeout", True),
    (430, 110, 95, 44, "Calculator", False),
    (535, 110, 95, 44, "PythonTool", False),
    (200, 110, 190, 44, "observation, cleaned", False),
    (10, 110, 150, 44, "env.step → StepResult", False),
    (10, 190, 620, 36, "Trajectory: prompt ids | model turn (mask 1) | observation (mask 0) | … ; Status", False),
]
ARROWS = [((160, 42), (200, 42)), ((390, 42), (430, 42)), ((480, 64), (478, 110)), ((580, 64), (582, 110)),
          ((430, 132), (390, 132)), ((200, 132), (160, 132)), ((85, 154), (85, 190))]


def svg() -> str:
    return boxes_svg.svg(BOXES, ARROWS, 640, 235)


if __name__ == "__main__":
    Path(__file__).with_name("50_tools.svg").write_text(svg())
