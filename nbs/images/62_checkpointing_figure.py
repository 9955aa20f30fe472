"""Source of 62_checkpointing.svg: what one checkpoint step holds (run: python 62_checkpointing_figure.py)."""
from pathlib import Path

ITEMS = [("params/", "trainable set only (LoRA for LoRA runs)"), ("opt_state/", "optax moments + count"),
         ("rng/", "the trainer's key data"), ("meta/", "JSON: step, data_position, trainable")]


def svg() -> str:
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="560" height="230" font-family="sans-serif" font-size="12">',
           '<rect x="10" y="10" width="250" height="210" rx="8" fill="#eef3fb" stroke="#557"/>',
           '<text x="20" y="32" font-weight="bold">checkpoint_dir/6/</text>']
    for i, (name, what) in enumerate(ITEMS):
        y = 50 + i * 42
        out.append(f'<rect x="25" y="{y}" width="220" height="32" rx="5" fill="#fff" stroke="#88a"/>')
        out.append(f'<text x="35" y="{y + 14}" font-family="monospace">{name}</text>')
        out.append(f'<text x="35" y="{y + 27}" font-size="10" fill="#444">{what}</text>')
    out += ['<rect x="300" y="20" width="250" height="56" rx="8" fill="#fde2e2" stroke="#a55"/>',
            '<text x="310" y="42" font-family="monospace">8.orbax-checkpoint-tmp-…/</text>',
            '<text x="310" y="62" font-size="11">killed save: reported, removed</text>',
            '<rect x="300" y="95" width="250" height="56" rx="8" fill="#fff4d6" stroke="#a85"/>',
            '<text x="310" y="117" font-family="monospace">6/ truncated</text>',
            '<text x="310" y="137" font-size="11">unreadable: warn, fall back to 4/</text>',
            '<rect x="300" y="170" width="250" height="50" rx="8" fill="#e3f5e1" stroke="#5a5"/>',
            '<text x="310" y="192" font-size="11">resume: restore all four, skip</text>',
            '<text x="310" y="208" font-size="11">data_position batches, go on</text>',
            '</svg>']
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    Path(__file__).with_name("62_checkpointing.svg").write_text(svg())
