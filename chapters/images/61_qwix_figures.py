"""Draws the figures of chapters/61_qwix.md:

- 61_qwix_interception.svg: one projection call inside a qwix-rewritten model, and what the provider does with it;
- 61_qwix_tiles.svg: how a QLoRA kernel is stored (4-bit codes, one float scale per tile of the contracting axis).

    python chapters/images/61_qwix_figures.py      # from the repository root
"""
from pathlib import Path

HERE = Path(__file__).resolve().parent
OURS = "#eef3fb"  # our unchanged model code
QWIX = "#ffe9b3"  # what qwix adds
MONO = "DejaVu Sans Mono, Menlo, monospace"
# The 16 NormalFloat-4 levels of Dettmers et al. (2023), as qwix uses them (rounded to 4 places).
NF4_LEVELS = [-1.0, -0.6962, -0.5251, -0.3949, -0.2844, -0.1848, -0.0911, 0.0,
              0.0796, 0.1609, 0.2461, 0.3379, 0.4407, 0.5626, 0.723, 1.0]


def svg(width, height, body):
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            'font-family="Helvetica, Arial, sans-serif" font-size="12">\n'
            '<defs><marker id="a" markerWidth="8" markerHeight="8" refX="7" refY="4" orient="auto">'
            '<path d="M0,0 L8,4 L0,8 z" fill="#555"/></marker></defs>\n'
            f'<rect width="{width}" height="{height}" fill="white"/>\n')
    return head + "\n".join(body) + "\n</svg>\n"


def rect(x, y, w, h, fill, stroke="#446", sw=1, rx=6):
    return f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="{rx}" fill="{fill}" stroke="{stroke}" stroke-width="{sw}"/>'


def text(x, y, s, size=12, anchor="start", weight="normal", family=None, fill="#222"):
    fam = f' font-family="{family}"' if family else ""
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return (f'<text x="{x}" y="{y}" font-size="{size}" text-anchor="{anchor}" font-weight="{weight}" '
            f'fill="{fill}"{fam}>{s}</text>')


def arrow(x0, y0, x1, y1, dashed=False):
    dash = ' stroke-dasharray="4,3"' if dashed else ""
    return f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y1}" stroke="#555" stroke-width="1.4"{dash} marker-end="url(#a)"/>'


def interception():
    b = []
    # left: the call as it runs, top to bottom
    steps = [
        (QWIX, "lora_model(tokens)", "its class is a subclass qwix made; only __call__ is wrapped"),
        (QWIX, "wrapper: patch for this thread", "jnp.einsum · lax.dot_general · jnp.dot · promote_dtype"),
        (OURS, "Transformer → Block → Attention", "our code, unchanged"),
        (OURS, "self.q_proj(x)   (nnx.Einsum)", 'calls jnp.einsum("BTD,DNH->BTNH", x, kernel)'),
        (QWIX, "on return: patches removed", "a submodule called on its own is never intercepted"),
    ]
    y = 20
    for i, (fill, title, sub) in enumerate(steps):
        b.append(rect(20, y, 330, 50, fill))
        b.append(text(185, y + 21, title, 13, "middle", "bold", MONO if "(" in title else None))
        b.append(text(185, y + 39, sub, 10.5, "middle"))
        if i < len(steps) - 1:
            b.append(arrow(185, y + 50, 185, y + 68))
        y += 70
    # right: the provider's decision for that one call
    b.append(rect(400, 20, 470, 330, QWIX, sw=2))
    b.append(text(635, 44, "LoraProvider.einsum(str, x, kernel)", 13, "middle", "bold", MONO))
    steps = [
        ("which module?", ["nearest `self` on the Python stack that is an nnx.Module:",
                           "q_proj, whose path is layers/0/attn/q_proj"]),
        ("which rule?", ["first regex that fully matches the path; none → plain einsum"]),
        ("a weight?", ["is the right operand this module's own Param? no → plain"]),
        ("QLoRA only", ["first call: quantise the kernel and store codes + scales in",
                        "its place on the module; later calls read them back"]),
        ("adapters", ["get or create kernel_lora_a [D, r], kernel_lora_b [r, N, H]:",
                      "nnx.LoRAParam, B = 0, the kernel's axis names copied"]),
        ("result", ["einsum(x, W) + α/r · einsum(x, A, B)"]),
    ]
    y = 72
    for num, (head, body) in enumerate(steps, 1):
        b.append(f'<circle cx="420" cy="{y - 4}" r="9" fill="white" stroke="#446"/>')
        b.append(text(420, y, str(num), 11, "middle", "bold"))
        b.append(text(436, y, head, 11.5, weight="bold"))
        for k, line in enumerate(body):
            b.append(text(540, y + 16 * k, line, 10.5))
        y += 16 * len(body) + 22
    b.append(arrow(350, 245, 398, 200))
    b.append(arrow(398, 330, 352, 262, dashed=True))
    b.append(text(366, 312, "y", 11, "middle", family=MONO))
    return svg(890, 375, b)


def tiles():
    b = []
    # a kernel [D, F] drawn as a grid: D split into tiles of T rows along the contracting axis
    x0, y0, w, h, n_tiles, n_cols = 40, 50, 260, 240, 4, 10
    b.append(text(x0 + w / 2, 30, "kernel W [D = 128, F] → codes (tile_size 32)", 13, "middle", "bold"))
    for t in range(n_tiles):
        shade = ["#dfe8f7", "#c9d8f1"][t % 2]
        b.append(rect(x0, y0 + t * h / n_tiles, w, h / n_tiles, shade, rx=0))
    for c in range(1, n_cols):
        b.append(f'<line x1="{x0 + c * w / n_cols}" y1="{y0}" x2="{x0 + c * w / n_cols}" y2="{y0 + h}" '
                 'stroke="#8aa" stroke-width="0.6"/>')
    b.append(rect(x0 + 2 * w / n_cols, y0 + h / n_tiles, w / n_cols, h / n_tiles, "none", stroke="#c0392b", sw=2, rx=0))
    b.append(text(x0 - 8, y0 + h / 2, "D (contracted)", 11, "middle", family=None).replace(
        "<text ", f'<text transform="rotate(-90 {x0 - 12} {y0 + h / 2})" '))
    b.append(text(x0 + w / 2, y0 + h + 20, "one tile = tile_size weights of one column", 11, "middle"))
    # the scales
    sx, sw_ = 360, 260
    b.append(text(sx + sw_ / 2, 30, "scales [4, F]  (float32)", 13, "middle", "bold"))
    for t in range(n_tiles):
        b.append(rect(sx, y0 + t * 34, sw_, 26, "#ffe9b3", rx=0))
    b.append(rect(sx + 2 * sw_ / n_cols, y0 + 34, sw_ / n_cols, 26, "none", stroke="#c0392b", sw=2, rx=0))
    b.append(arrow(x0 + 2.5 * w / n_cols + 14, y0 + 1.5 * h / n_tiles, sx + 2 * sw_ / n_cols - 2, y0 + 47))
    b.append(text(sx, y0 + 4 * 34 + 22, "m = max |W| over the tile;  scale s = m / 127.5 (int8),  s = m (nf4)", 11))
    b.append(text(sx, y0 + 4 * 34 + 40, "int8:  code = round(W / s),            W ≈ code · s", 11, family=MONO))
    b.append(text(sx, y0 + 4 * 34 + 58, "nf4:   code = nearest level to W / s,  W ≈ level[code] · s", 11, family=MONO))
    # the NF4 levels on [-1, 1]
    ax0, ax1, ay = 360, 820, y0 + 4 * 34 + 100
    b.append(f'<line x1="{ax0}" y1="{ay}" x2="{ax1}" y2="{ay}" stroke="#444" stroke-width="1"/>')
    for v in NF4_LEVELS:
        x = ax0 + (v + 1) / 2 * (ax1 - ax0)
        b.append(f'<line x1="{x:.1f}" y1="{ay - 8}" x2="{x:.1f}" y2="{ay + 8}" stroke="#c0392b" stroke-width="1.6"/>')
    for v in (-1, 0, 1):
        b.append(text(ax0 + (v + 1) / 2 * (ax1 - ax0), ay + 22, str(v), 10, "middle"))
    b.append(text((ax0 + ax1) / 2, ay - 16, "the 16 NF4 levels: quantiles of a normal, denser near 0", 11, "middle"))
    return svg(850, 340, b)


def main():
    (HERE / "61_qwix_interception.svg").write_text(interception())
    (HERE / "61_qwix_tiles.svg").write_text(tiles())


if __name__ == "__main__":
    main()
