"""Per-step figures from the times each global step ended: shared by both sides of the real-work comparison.

Plain Python (no JAX, no library import), so upstream's side, which runs in its own environment, can use it too.
"""
import statistics


def step_figures(train_start: float, ends: list, script_start: float) -> dict:
    """Per-step seconds from the step end times; first step from the train call and from the script's start."""
    steps = [b - a for a, b in zip([train_start] + ends[:-1], ends)]
    return {"step_seconds": [round(x, 4) for x in steps],
            "first_step_s": round(steps[0], 3) if steps else None,
            "first_step_s_from_process_start": round(ends[0] - script_start, 3) if ends else None,
            "median_step_s": round(statistics.median(steps[1:]), 4) if len(steps) > 1 else None,
            "train_seconds_to_last_step": round(ends[-1] - train_start, 2) if ends else None}
