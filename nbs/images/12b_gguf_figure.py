"""Source of 12b_gguf.svg: a GGUF file through dequantisation and the cache into the decoder (run: python 12b_gguf_figure.py)."""
from pathlib import Path

import boxes_svg

BOXES = [  # (x, y, w, h, text, highlighted)
    (10, 10, 190, 40, "'gemma3-270m' | 'smollm2-135m'", False),
    (10, 90, 190, 40, "any .gguf path", False),
    (250, 50, 150, 40, "resolve_gguf", True),
    (450, 10, 220, 40, "metadata → config.json, tokenizer", True),
    (450, 90, 220, 40, "Q8_0 / Q4_K … blocks → float32", True),
    (720, 50, 200, 40, "cache: HF checkpoint dir", True),
    (720, 130, 200, 40, "load_hf + load_tokenizer", False),
    (450, 170, 220, 40, "(Transformer, Tokenizer)", False),
]
ARROWS = [((200, 30), (250, 65)), ((200, 110), (250, 75)), ((400, 65), (450, 30)), ((400, 75), (450, 110)),
          ((670, 30), (720, 65)), ((670, 110), (720, 75)), ((820, 90), (820, 130)), ((720, 160), (670, 185))]


def svg() -> str:
    return boxes_svg.svg(BOXES, ARROWS, 930, 220)


if __name__ == "__main__":
    Path(__file__).with_name("12b_gguf.svg").write_text(svg())
