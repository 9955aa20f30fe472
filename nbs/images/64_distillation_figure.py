"""Source of 64_distillation.svg: a frozen teacher's softened logits as the student's target (run: python 64_distillation_figure.py)."""
from pathlib import Path

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
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="660" height="225" font-family="sans-serif" font-size="12">',
           '<defs><marker id="a" markerWidth="8" markerHeight="8" refX="7" refY="4" orient="auto">'
           '<path d="M0,0 L8,4 L0,8 z" fill="#555"/></marker></defs>']
    for x, y, w, h, text, hi in BOXES:
        out.append(f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="6" fill="{"#ffe9b3" if hi else "#eef3fb"}" stroke="#557"/>')
        out.append(f'<text x="{x + w / 2}" y="{y + h / 2 + 4}" text-anchor="middle">{text}</text>')
    for (x1, y1), (x2, y2) in ARROWS:
        out.append(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="#555" marker-end="url(#a)"/>')
    return "\n".join(out + ["</svg>"]) + "\n"


if __name__ == "__main__":
    Path(__file__).with_name("64_distillation.svg").write_text(svg())
