"""Source of 60_two_paths.svg: one train step, two paths, one type tag (run: python 60_two_paths_figure.py)."""
from pathlib import Path


def box(x, y, w, h, text, fill="#eef3fb", size=12):
    lines = text.split("|")
    out = [f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="6" fill="{fill}" stroke="#557"/>']
    for i, line in enumerate(lines):
        ty = y + h / 2 + 4 + (i - (len(lines) - 1) / 2) * 15
        out.append(f'<text x="{x + w / 2}" y="{ty}" text-anchor="middle" font-size="{size}">{line}</text>')
    return out


def arrow(x1, y1, x2, y2):
    return [f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="#555" marker-end="url(#a)"/>']


def svg() -> str:
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="720" height="300" font-family="sans-serif">',
           '<defs><marker id="a" markerWidth="8" markerHeight="8" refX="7" refY="4" orient="auto">'
           '<path d="M0,0 L8,4 L0,8 z" fill="#555"/></marker></defs>']
    out += box(10, 20, 200, 60, "model state|nnx.Param  ·  nnx.LoRAParam", "#fff")
    out += box(10, 110, 200, 60, "type tag → wrt|LoRAParam if any, else Param", "#ffe9b3")
    out += box(10, 200, 200, 70, "carry (donated): wrt params,|opt state, rng, halted|frozen: everything else", "#fff", 11)
    out += arrow(110, 80, 110, 110) + arrow(110, 170, 110, 200)
    out += box(280, 20, 180, 60, "path A (A = 1)|grad of Σ loss, ÷ N", "#eef3fb")
    out += box(280, 110, 180, 80, "path B (A > 1)|lax.scan over [A, B, T]:|Σ∇S_i, ΣN_i, ÷ once", "#eef3fb")
    out += arrow(210, 235, 280, 60) + arrow(210, 235, 280, 150)
    out += box(520, 60, 190, 70, "finite loss &amp; grad?|yes: optimizer.update|no: keep old state, halt", "#e3f5e1", 11)
    out += arrow(460, 50, 520, 85) + arrow(460, 150, 520, 110)
    out += box(520, 180, 190, 80, "checkpoint (ch. 62)|saves wrt params only:|LoRA run → LoRA-only", "#fde2e2", 11)
    out += arrow(615, 130, 615, 180)
    return "\n".join(out + ["</svg>"]) + "\n"


if __name__ == "__main__":
    Path(__file__).with_name("60_two_paths.svg").write_text(svg())
