"""`python -m tuner.cli`."""

from tuner.cli import entry

entry()
