"""The IREE versions a result depends on: part of every stored result's key."""

from __future__ import annotations


def compiler_version() -> str:
    try:
        from iree.compiler.version import VERSION
    except ImportError:
        return "none"
    return VERSION


def runtime_version() -> str:
    try:
        from iree.runtime.version import VERSION
    except ImportError:
        return "none"
    return VERSION
