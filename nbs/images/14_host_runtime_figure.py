"""Source of 14_host_runtime.svg: where a compiled step's buffers come from, with and without the tuning (run: python 14_host_runtime_figure.py)."""
from pathlib import Path

from boxes_svg import svg

BOXES = [
    (10, 20, 150, 40, "jitted step (XLA:CPU)", False),
    (210, 20, 170, 40, "malloc (glibc), default", False),
    (430, 20, 200, 40, "fresh mmap: 1 fault per 4 KiB", False),
    (210, 100, 170, 40, "malloc, tuned heap", True),
    (430, 100, 200, 40, "pages already mapped: no fault", True),
]
ARROWS = [((160, 40), (210, 40)), ((380, 40), (430, 40)), ((85, 60), (210, 118)), ((380, 120), (430, 120))]

if __name__ == "__main__":
    Path(__file__).with_name("14_host_runtime.svg").write_text(svg(BOXES, ARROWS, 640, 150))
