"""The command line (`iree-tuner`, `python -m tuner.cli`): thin click commands over the Python
API (tuner.cli.commands; those over a finished run's directory in
tuner.cli.directory_commands), their shared options (tuner.cli.options), and what they print
(tuner.cli.say); the one place errors become exit codes. Imports nothing of the compiler at
module level, so `benchmark` runs with the runtime only."""

from tuner.cli.commands import main
from tuner.cli.directory_commands import rebuild, report, run
from tuner.cli.options import watch_for_stop

main.add_command(report)
main.add_command(rebuild)
main.add_command(run)


def entry() -> None:
    """The `iree-tuner` program and `python -m tuner.cli`: the commands, with the stop watcher
    (tuner.cli.options.watch_for_stop) that only a process of the tuner's own may have. `main`
    called inside another program (a test's CliRunner) leaves that program's signals alone: the
    watcher would end it 60 s after a signal it handles itself."""
    watch_for_stop()
    main()


__all__ = ["entry", "main"]
