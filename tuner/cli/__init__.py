"""The command line (`iree-tuner`, `python -m tuner.cli`): thin click commands over the Python
API (tuner.cli.commands; those over a finished run's directory in
tuner.cli.directory_commands), their shared options (tuner.cli.options), and what they print
(tuner.cli.say); the one place errors become exit codes. Imports nothing of the compiler at
module level, so `benchmark` runs with the runtime only."""

from tuner.cli.commands import main
from tuner.cli.directory_commands import rebuild, report, run

main.add_command(report)
main.add_command(rebuild)
main.add_command(run)

__all__ = ["main"]
