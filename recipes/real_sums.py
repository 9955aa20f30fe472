"""Sums written as text for a real pretrained model: the prompts, the data files, a graded reward, exact accuracy.

The prompt asks the question and starts the answer line, "Question: What is 7 + 15?\nAnswer: 7 + 15 =",
so the model's next few tokens are the number. Operands run from 0 to 19: Gemma 3 270M answers about
half of these right before training, which leaves room for RL to show a gain.

    python recipes/real_sums.py        # writes recipes/data/sums20_{train,heldout}.jsonl (fixed by the seed)
    python recipes/real_sums.py --chat smollm2-135m   # and sums20_chat_*.jsonl through that model's chat template

For an instruction-tuned model the same problems are asked as a chat, "What is 7 + 15? Answer with the number
only.", rendered through the model's own chat template up to the start of the assistant's turn.
"""
import json
import random
import re
from pathlib import Path

PROMPT = "Question: What is {a} + {b}?\nAnswer: {a} + {b} ="
LIMIT = 20  # operands 0..19: 400 problems
HELDOUT = 100  # problems held out (never trained on), chosen by the seed
QUESTION = "What is {a} + {b}? Answer with the number only."
_LEADING_INTEGER = re.compile(r"\s*(-?\d+)")


def problems(seed: int = 0) -> tuple[list[dict], list[dict]]:
    """(train rows, held-out rows), each {'prompt', 'answer'}; the split is fixed by `seed`."""
    rows = [{"prompt": PROMPT.format(a=a, b=b), "answer": str(a + b), "a": a, "b": b}
            for a in range(LIMIT) for b in range(LIMIT)]
    random.Random(seed).shuffle(rows)
    return rows[HELDOUT:], rows[:HELDOUT]


def answer_of(completion: str):
    """The integer the completion starts with (after spaces), or None."""
    m = _LEADING_INTEGER.match(completion)
    return int(m.group(1)) if m else None


def reward(prompts, completions, answer, **_) -> list[float]:
    """1 for the right sum; a wrong integer earns up to 0.5, less the further it is off (0 at 5 away); 0 for no number."""
    out = []
    for c, a in zip(completions, answer):
        got = answer_of(c)
        if got is None:
            out.append(0.0)
        elif got == int(a):
            out.append(1.0)
        else:
            out.append(0.5 * max(0.0, 1.0 - abs(got - int(a)) / 5))
    return out


def accuracy(prompts, completions, answer, **_) -> list[float]:
    """1.0 where the completion starts with the right sum, else 0.0 (held-out greedy accuracy)."""
    return [float(answer_of(c) == int(a)) for c, a in zip(completions, answer)]


def chat(rows: list[dict], tokenizer) -> list[dict]:
    """The rows with each prompt asked as a user turn through `tokenizer`'s chat template (assistant turn opened)."""
    return [{**r, "prompt": tokenizer.apply_chat_template([{"role": "user", "content": QUESTION.format(**r)}])}
            for r in rows]


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="write the sums data files next to the recipes")
    parser.add_argument("--chat", metavar="MODEL", help="also the chat files, rendered by MODEL's tokenizer")
    args = parser.parse_args()
    here = Path(__file__).parent / "data"
    here.mkdir(exist_ok=True)
    tokenizer = None
    if args.chat:
        from tunix_lit.recipes import load_model

        tokenizer = load_model(args.chat)[1]
    for name, rows in zip(("train", "heldout"), problems()):
        files = {f"sums20_{name}.jsonl": rows}
        if tokenizer is not None:
            files[f"sums20_chat_{name}.jsonl"] = chat(rows, tokenizer)
        for file, out in files.items():
            (here / file).write_text("".join(json.dumps(r) + "\n" for r in out))
            print(file, len(out))
