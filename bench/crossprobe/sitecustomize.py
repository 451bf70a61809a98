"""The probe of bench/crossings.py, in a child whose ``PYTHONPATH`` starts with this folder.

Does nothing unless ``CROSSINGS_OUT`` is set. Then SIGUSR2 toggles a recorder: the first signal starts it
(and writes ``{CROSSINGS_OUT}.on``), the second stops it and writes ``{CROSSINGS_OUT}.json``: one row per
a2amesh function entered while it ran (a first entry: a coroutine or generator resumed is not a call),
``[unit, function, caller unit, kind, root]``. The unit is the first name after ``a2amesh.`` (``executor``,
``client``; ``a2amesh`` for the package's ``__init__``). The caller is the nearest a2amesh frame below it
on the stack, library frames (pydantic, the a2a SDK, structlog) passed through (kind ``call``). The walk
stops at the event loop (asyncio, uvloop) and at a thread's start: a function entered from there is the
first frame of a task, whose caller is the a2amesh function that made the task's coroutine (kind
``task``: from the coroutine's ``cr_origin``), or else an entry from outside (kind ``entry``, the caller
being the library below it, or ``loop``). The root is the outermost a2amesh function on the stack (a task's
coroutine, a callback): what the work belongs to, so a timer's work can be told from a call's.
"""

import os

_OUT = os.environ.get("CROSSINGS_OUT", "")
if _OUT:
    import asyncio
    import dis
    import json
    import signal
    import sys
    import threading
    from importlib.util import find_spec
    from types import FrameType
    from typing import Any

    _spec = find_spec("a2amesh")
    _ROOT = os.path.dirname(_spec.origin) + os.sep if _spec and _spec.origin else "\0"
    _RESUME = dis.opmap["RESUME"]
    _BOUNDARY = ("asyncio", "uvloop", "threading", "concurrent", "runpy")
    _units: dict[str, str | None] = {}
    _libs: dict[str, str] = {}
    _rows: list[list[str]] = []
    _state = {"on": False}

    def _unit(filename: str) -> str | None:
        """``executor`` for ``…/a2amesh/executor/runner.py``; None outside a2amesh."""
        unit = _units.get(filename, "")
        if unit == "":
            if filename.startswith(_ROOT):
                rel = filename[len(_ROOT) :]
                head = rel.split(os.sep, 1)[0]
                unit = "a2amesh" if head == "__init__.py" else head.removesuffix(".py")
            else:
                unit = None
            _units[filename] = unit
        return unit

    def _lib(filename: str) -> str:
        """The top-level package a file of a library belongs to (``nats``, ``asyncio``, ``uvicorn``)."""
        lib = _libs.get(filename)
        if lib is None:
            tail = filename.rsplit("site-packages" + os.sep, 1)[-1]
            if tail == filename:  # the standard library
                tail = filename.rsplit(os.sep + "python3.", 1)[-1].split(os.sep, 1)[-1]
            lib = tail.split(os.sep, 1)[0].removesuffix(".py") or "?"
            _libs[filename] = lib
        return lib

    def _creator(frame: FrameType) -> str | None:
        """The a2amesh unit that made the current task's coroutine, when ``frame`` is that coroutine's."""
        try:
            task = asyncio.current_task()
        except RuntimeError:
            return None
        coro: Any = task.get_coro() if task is not None else None
        if getattr(coro, "cr_frame", None) is not frame:
            return None
        for filename, _line, _func in getattr(coro, "cr_origin", None) or ():
            unit = _unit(filename)
            if unit is not None:
                return unit
            if _lib(filename) in _BOUNDARY:
                return None
        return None

    def _name(frame: FrameType) -> str:
        return f"{frame.f_globals.get('__name__', '?')}:{frame.f_code.co_qualname}"

    def _record(frame: FrameType, unit: str) -> None:
        caller: str | None = None
        top = root = frame  # the outermost a2amesh frame of this stack; the last frame above the loop
        below = frame.f_back
        while below is not None:
            filename = below.f_code.co_filename
            found = _unit(filename)
            if found is not None:
                caller = caller or found
                top = below
            elif _lib(filename) in _BOUNDARY:
                break
            root, below = below, below.f_back
        if caller is not None:
            _rows.append([unit, _name(frame), caller, "call", _name(top)])
            return
        made_by = _creator(root)
        if made_by is not None:
            _rows.append([unit, _name(frame), made_by, "task", _name(top)])
            return
        outside = _lib(frame.f_back.f_code.co_filename) if frame.f_back is not None else "loop"
        _rows.append([unit, _name(frame), "loop" if outside in _BOUNDARY else outside, "entry", _name(top)])

    def _profile(frame: FrameType, event: str, arg: object) -> None:
        if event != "call" or not _state["on"]:
            return
        unit = _unit(frame.f_code.co_filename)
        if unit is None:
            return
        code = frame.f_code.co_code
        at = frame.f_lasti
        if 0 <= at < len(code) - 1 and code[at] == _RESUME and code[at + 1] != 0:
            return  # a coroutine or generator resumed, not called
        _record(frame, unit)

    def _toggle(signum: int, frame: object) -> None:
        if not _state["on"]:
            _rows.clear()
            _state["on"] = True
            sys.setprofile(_profile)
            with open(_OUT + ".on", "w") as fh:
                fh.write(str(os.getpid()))
            return
        sys.setprofile(None)
        _state["on"] = False
        with open(_OUT + ".json.part", "w") as fh:
            json.dump(_rows, fh)
        os.replace(_OUT + ".json.part", _OUT + ".json")

    sys.set_coroutine_origin_tracking_depth(16)
    threading.setprofile(_profile)
    signal.signal(signal.SIGUSR2, _toggle)
