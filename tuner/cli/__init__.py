"""The command line (`iree-tuner`, `python -m tuner.cli`): thin click commands over the Python
API (tuner.cli.commands), their shared options (tuner.cli.options), and what they print
(tuner.cli.say); the one place errors become exit codes. Imports nothing of the compiler at
module level, so `benchmark` runs with the runtime only."""

from tuner.cli.commands import main

__all__ = ["main"]
