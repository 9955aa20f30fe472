"""Source of 60_peft_trainer.svg: where the trainer sits (run: python 60_peft_trainer_figure.py)."""
from pathlib import Path

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
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="660" height="210" font-family="sans-serif" font-size="12">',
           '<defs><marker id="a" markerWidth="8" markerHeight="8" refX="7" refY="4" orient="auto">'
           '<path d="M0,0 L8,4 L0,8 z" fill="#555"/></marker></defs>']
    for x, y, w, h, text, hi in BOXES:
        out.append(f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="6" fill="{"#ffe9b3" if hi else "#eef3fb"}" stroke="#557"/>')
        out.append(f'<text x="{x + w / 2}" y="{y + h / 2 + 4}" text-anchor="middle">{text}</text>')
    for (x1, y1), (x2, y2) in ARROWS:
        out.append(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="#555" marker-end="url(#a)"/>')
    return "\n".join(out + ["</svg>"]) + "\n"


if __name__ == "__main__":
    Path(__file__).with_name("60_peft_trainer.svg").write_text(svg())
