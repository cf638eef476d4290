"""The implementation of the exported interface `tool`.

componentize-py looks for the class of each resource of an exported interface in a top-level
module named after the interface (snake case): the resource `session` of `tool` is the class
`Session` of this module. Without this file the build fails with
`ModuleNotFoundError: No module named 'tool'`. The code lives in `app.py`.
"""

from app import Session

__all__ = ["Session"]
