"""A JSON file the user names (a configs list, a seeds file), read with one clear error line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tuner.errors import InputError


def read_json(path: Path, what: str) -> Any:
    """The JSON in `path`, or an InputError naming it as `what` ("configs", "seeds")."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: no such {what} file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{path}: not a JSON {what} file ({e})") from None
