"""Draws nbs/images/61_lora.svg: where LoRA / QLoRA sits between the model, the trainer and an exported checkpoint.

    python nbs/images/61_lora_figure.py      # from the repository root
"""
from pathlib import Path

HERE = Path(__file__).resolve().parent
THIS = ("#ffe9b3", 2)  # built in this chapter: fill, stroke width
OTHER = ("#eef3fb", 1)  # other chapters


def box(x, y, w, h, title, lines, style):
    fill, stroke = style
    out = [f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="6" fill="{fill}" stroke="#446" stroke-width="{stroke}"/>']
    top = y + h / 2 - 7.5 * len(lines) + 4
    out.append(f'<text x="{x + w / 2}" y="{top}" text-anchor="middle" font-weight="bold" font-size="13">{title}</text>')
    for i, line in enumerate(lines):
        out.append(f'<text x="{x + w / 2}" y="{top + 15 * (i + 1)}" text-anchor="middle" font-size="11">{line}</text>')
    return out


def arrow(x0, y0, x1, y1, label=None):
    out = [f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y1}" stroke="#555" stroke-width="1.5" marker-end="url(#a)"/>']
    if label:
        out.append(f'<text x="{(x0 + x1) / 2}" y="{min(y0, y1) - 6}" text-anchor="middle" font-size="10" '
                   f'fill="#555">{label}</text>')
    return out


def main():
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="940" height="195" '
             'font-family="Helvetica, Arial, sans-serif" font-size="12">',
             '<defs><marker id="a" markerWidth="8" markerHeight="8" refX="7" refY="4" orient="auto">'
             '<path d="M0,0 L8,4 L0,8 z" fill="#555"/></marker></defs>']
    parts += box(10, 30, 160, 60, "Transformer", ["10_model · 12_loader", "13b_tiny_world"], OTHER)
    parts += box(200, 20, 180, 80, "apply_lora", ["qwix LoraProvider", "A, B as nnx.LoRAParam", "QLoRA: nf4 / int8 base"],
                 THIS)
    parts += box(410, 30, 140, 60, "PeftTrainer", ["60_peft_trainer", "wrt = nnx.LoRAParam"], OTHER)
    parts += box(580, 30, 160, 60, "merge_lora", ["W + (α/r)·A·B", "→ plain Transformer"], THIS)
    parts += box(770, 30, 160, 60, "save_merged_hf", ["loader.save_hf", "→ HF safetensors"], THIS)
    parts += box(410, 130, 140, 50, "LoRA-only ckpt", ["62_checkpointing"], OTHER)
    parts += box(770, 130, 160, 50, "transformers, vLLM", ["any HF reader"], OTHER)
    parts += arrow(170, 60, 198, 60)
    parts += arrow(380, 60, 408, 60)
    parts += arrow(550, 60, 578, 60)
    parts += arrow(740, 60, 768, 60)
    parts += arrow(480, 90, 480, 128)
    parts += arrow(850, 90, 850, 128)
    parts.append("</svg>")
    (HERE / "61_lora.svg").write_text("\n".join(parts) + "\n")


if __name__ == "__main__":
    main()
