"""Source of 63_dpo.svg: preference pairs through the policy and a frozen reference (run: python 63_dpo_figure.py)."""
from pathlib import Path

BOXES = [  # (x, y, w, h, text, highlighted)
    (10, 20, 190, 44, "pairs: prompt, chosen, rejected", False),
    (10, 120, 190, 44, "encode_preference_pairs (text)", False),
    (260, 10, 170, 40, "reference (frozen)", False),
    (260, 75, 170, 40, "policy (trains)", False),
    (490, 10, 160, 40, "Σ log π_ref per response", False),
    (490, 75, 160, 40, "Σ log π per response", False),
    (260, 150, 170, 44, "loss: DPO | IPO | ORPO", True),
    (490, 150, 160, 44, "PeftTrainer step (ch. 60)", False),
]
ARROWS = [((105, 120), (105, 64)), ((200, 35), (260, 30)), ((200, 50), (260, 92)), ((430, 30), (490, 30)),
          ((430, 95), (490, 95)), ((570, 50), (400, 150)), ((570, 115), (420, 150)), ((430, 172), (490, 172))]


def svg() -> str:
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="660" height="205" font-family="sans-serif" font-size="12">',
           '<defs><marker id="a" markerWidth="8" markerHeight="8" refX="7" refY="4" orient="auto">'
           '<path d="M0,0 L8,4 L0,8 z" fill="#555"/></marker></defs>']
    for x, y, w, h, text, hi in BOXES:
        out.append(f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="6" fill="{"#ffe9b3" if hi else "#eef3fb"}" stroke="#557"/>')
        out.append(f'<text x="{x + w / 2}" y="{y + h / 2 + 4}" text-anchor="middle">{text}</text>')
    for (x1, y1), (x2, y2) in ARROWS:
        out.append(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="#555" marker-end="url(#a)"/>')
    return "\n".join(out + ["</svg>"]) + "\n"


if __name__ == "__main__":
    Path(__file__).with_name("63_dpo.svg").write_text(svg())
