# componentize-py takes the class of the resource `session` of the exported interface `tool`
# from a module named after the interface: this one. The code is in app.py.
from app import Session

__all__ = ["Session"]
