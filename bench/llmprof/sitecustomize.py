"""Profilers for bench/prof_llm.py, enabled by LLMPROF in a child's environment (this folder on PYTHONPATH).

LLMPROF=cpu: a CPU-time sampler (SIGPROF); LLMPROF=calls: counts Python and C calls (sys.setprofile);
LLMPROF=cprof: cProfile (time per function, C functions included, inflated by the profiler's own cost).
SIGUSR2 toggles: the first resets and starts, the second stops and writes LLMPROF_OUT.<k> (collapsed stacks
with counts for cpu, ``function count`` lines for calls, a pstats file for cprof).
"""

import os

_MODE = os.environ.get("LLMPROF", "")
if _MODE:
    import collections
    import signal
    import sys

    _counts: collections.Counter[str] = collections.Counter()
    _state = {"k": 0, "on": False}

    def _name(code: object) -> str:
        c = code
        f = c.co_filename.rsplit("site-packages/", 1)[-1].rsplit("shared/", 1)[-1]  # type: ignore[attr-defined]
        return f"{c.co_name} ({f})"  # type: ignore[attr-defined]

    def _sample(signum: int, frame: object) -> None:
        if not _state["on"]:
            return
        parts = []
        f = frame
        while f is not None:
            parts.append(f"{_name(f.f_code)}:{f.f_lineno}")  # type: ignore[attr-defined]
            f = f.f_back  # type: ignore[attr-defined]
        _counts[";".join(reversed(parts))] += 1

    def _on_call(frame: object, event: str, arg: object) -> None:
        if event == "call":
            _counts[_name(frame.f_code)] += 1  # type: ignore[attr-defined]
        elif event == "c_call":
            _counts[f"C {getattr(arg, '__qualname__', repr(arg))}"] += 1

    _cprofile: list[object] = []

    def _toggle(signum: int, frame: object) -> None:
        path = f"{os.environ.get('LLMPROF_OUT', '/tmp/llmprof')}.{_state['k']}"
        if _MODE == "cprof":
            import cProfile

            if not _state["on"]:
                _cprofile[:] = [cProfile.Profile()]
                _cprofile[0].enable()  # type: ignore[attr-defined]
                _state["on"] = True
                return
            _cprofile[0].disable()  # type: ignore[attr-defined]
            _cprofile[0].dump_stats(path)  # type: ignore[attr-defined]
            _state["on"] = False
            _state["k"] += 1
            return
        if not _state["on"]:
            _counts.clear()
            _state["on"] = True
            if _MODE == "calls":
                sys.setprofile(_on_call)
            return
        if _MODE == "calls":
            sys.setprofile(None)
        _state["on"] = False
        _state["k"] += 1
        with open(path, "w") as fh:
            for k, v in _counts.items():
                fh.write(f"{k} {v}\n")

    if _MODE == "cpu":
        signal.signal(signal.SIGPROF, _sample)
        signal.setitimer(signal.ITIMER_PROF, 0.001, 0.001)
    signal.signal(signal.SIGUSR2, _toggle)
