"""Evaluating built candidates: evaluators and strategies, numerics and timing, devices, the runtime tools, comparisons side by side."""
