"""Draws the sampler chapter's figures into nbs/images/:

- 15_sampler.svg: where the sampler sits, and its two compiled functions;
- 15_sampler_buffer.svg: the fixed token buffer filling, step by step, for three prompts.

    python nbs/images/15_sampler_figure.py      # from the repository root
"""
from matplotlib.patches import Rectangle
from mpl_boxes import HERE, MONO, OTHER, THIS, box, plt, arrow


def placement():
    fig, ax = plt.subplots(figsize=(11, 3.9))
    ax.set_xlim(0, 11)
    ax.set_ylim(0, 3.9)
    ax.axis("off")
    box(ax, 0.95, 3.1, 1.6, 0.7, "prompts", OTHER, "str or ids")
    box(ax, 0.95, 1.6, 1.6, 0.7, "tokenizer", OTHER, "chapter 11")
    box(ax, 3.05, 2.35, 2.1, 0.8, "fixed buffer", THIS, "left-pad to P, +G slots")
    box(ax, 5.5, 3.05, 2.2, 0.8, "prefill  (jit)", THIS, "[B,P] once, sample slot P")
    box(ax, 5.5, 1.55, 2.2, 0.8, "decode  (jit)", THIS, "lax.while_loop, 1 slot/iter")
    box(ax, 8.1, 2.35, 2.2, 0.8, "SamplerOutput", THIS, "text · tokens · logprobs")
    box(ax, 10.15, 2.35, 1.5, 0.7, "RL learners", OTHER, "chapters 20-33")
    box(ax, 3.05, 0.45, 2.1, 0.6, "Transformer", OTHER, "chapter 10")
    arrow(ax, 0.95, 2.75, 0.95, 1.95)
    arrow(ax, 1.75, 1.75, 2.0, 2.1)
    ax.text(1.95, 1.65, "ids", fontsize=7.5, color="#555")
    arrow(ax, 4.1, 2.55, 4.4, 2.9)
    arrow(ax, 5.5, 2.65, 5.5, 1.95, "carry: buffer, KV cache", dy=0.0)
    ax.text(7.3, 1.0, "carry donated:\nupdated in place", fontsize=7.5, color="#555", ha="center")
    arrow(ax, 6.6, 1.75, 7.0, 2.15)
    ax.text(6.95, 1.75, "one fetch", fontsize=7.5, color="#555")
    arrow(ax, 9.2, 2.35, 9.4, 2.35)
    arrow(ax, 4.1, 0.45, 5.3, 1.15)
    ax.text(4.35, 0.3, "graphdef static, state as argument", fontsize=7.5, color="#555")
    ax.text(0.1, 0.05, "blue: tunix_lit.generate.sampler (this chapter);  grey: other chapters",
            fontsize=7.5, color="#555")
    fig.savefig(HERE / "15_sampler.svg", bbox_inches="tight")
    plt.close(fig)


# The tiny model's greedy run on three prompts, as chapter 15 shows it: '·' pad, '^' BOS, '$' EOS.
P, G = 8, 8
FINAL = ["··^12+7=28$·····", "···^3+4=36$·····", "·^45+45=99$·····"]
STAGES = [  # (title, slots filled so far, slot fed to the model or None, cache slots written afterwards)
    ("1. left-padded prompts: every row's last prompt token in slot P-1 = 7", P, None, 0),
    ("2. prefill: cache slots 0-7 written in one call; slot 8 sampled from slot 7's logits", P + 1, None, P),
    ("3. decode iteration, step 8: feed slot 8 at cache index 8, write slot 9", P + 2, 8, P + 1),
    ("4. step 9: every row writes its stop token '$' into slot 10; all rows done, the loop exits", P + 3, 9, P + 2),
]


def buffer_stages():
    rows = len(FINAL)
    fig, axes = plt.subplots(len(STAGES), 1, figsize=(9, 1.2 * len(STAGES) + 0.4))
    for ax, (title, filled, fed, written) in zip(axes, STAGES):
        ax.set_xlim(-0.6, P + G + 3.2)
        ax.set_ylim(-0.35, rows + 0.75)
        ax.axis("off")
        ax.text(-0.6, rows + 0.35, title, fontsize=8.5, ha="left", va="center")
        for r, text in enumerate(FINAL):
            y = rows - 1 - r
            for s, ch in enumerate(text):
                shown = ch if s < filled else "·"
                if s < filled and ch != "·":
                    face = "#e8eef7" if s < P else "#fbe3c6"
                else:
                    face = "#ffffff"
                edge = "#c0392b" if fed == s else "#999999"
                ax.add_patch(Rectangle((s, y), 0.92, 0.8, fc=face, ec=edge, lw=1.6 if fed == s else 0.6))
                ax.text(s + 0.46, y + 0.4, shown, ha="center", va="center", family=MONO, fontsize=8.5,
                        color="#999999" if shown == "·" else "#222")
        ax.plot([P - 0.04, P - 0.04], [-0.15, rows - 0.05], color="#5b7db1", lw=1.2, ls="--")
        ax.text(P + G + 0.3, rows / 2 - 0.1, f"KV cache:\n{written} slots written",
                fontsize=7.5, color="#555", va="center")
    axes[-1].text(-0.6, -0.3, "blue: prompt slots 0..P-1;  orange: generated;  red outline: the slot fed to the "
                  "model;  dashed: P", fontsize=7.5, color="#555", va="top")
    fig.savefig(HERE / "15_sampler_buffer.svg", bbox_inches="tight")
    plt.close(fig)


if __name__ == "__main__":
    placement()
    buffer_stages()
