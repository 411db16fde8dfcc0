# The driver of a warren-agent code context: a persistent Python interpreter.
#
# Once ready it writes {"ready": true} on fd 4. Then it reads requests on fd 3,
# one JSON object per line: {"code": ..., "mark": ...}, and answers each on fd 4
# with one JSON line: {"result": repr-or-"", "error": {"name", "value",
# "traceback"} or null}, and "truncated": true when the repr was cut at
# MAX_RESULT characters. The code runs in one module namespace
# that lives as long as the process, so variables, imports, functions and open
# files persist between calls. Its stdin is /dev/null; its stdout and stderr are
# the process's own, which the agent reads: after each call the driver flushes
# them and writes "\x1eW:" + mark + "\x1e" to each, so the agent knows where the
# call's output ends (a subprocess's output is caught too).
#
# SIGINT raises KeyboardInterrupt in the code while it runs, and is ignored
# between calls. Standard library only.
import ast
import builtins
import json
import linecache
import os
import signal
import sys
import traceback
import types

DRIVER = os.path.abspath(__file__)
MAX_RESULT = 4 << 20  # characters of a result's repr kept
CO_COROUTINE = 0x80
TOP_LEVEL_AWAIT = getattr(ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)


class State:
    running = False
    loop = None


def on_sigint(signum, frame):
    if State.running:
        raise KeyboardInterrupt


def strip_driver(te):
    """Drops the driver's frames from a TracebackException and its chain."""
    seen = set()
    while te is not None and id(te) not in seen:
        seen.add(id(te))
        te.stack = traceback.StackSummary.from_list(
            [f for f in te.stack if f.filename != DRIVER])
        for chained in (te.__cause__, te.__context__):
            if chained is not None:
                strip_driver(chained)
        te = None


def describe(e, frames=True):
    try:
        value = str(e)
    except BaseException:
        value = "<unprintable %s>" % type(e).__name__
    try:
        te = traceback.TracebackException(type(e), e, e.__traceback__ if frames else None)
        strip_driver(te)
        text = "".join(te.format())
    except BaseException:
        text = "%s: %s\n" % (type(e).__name__, value)
    return {"name": type(e).__name__, "value": value, "traceback": text}


def evaluate(code, ns):
    if code.co_flags & CO_COROUTINE:
        import asyncio
        if State.loop is None:
            State.loop = asyncio.new_event_loop()
        return State.loop.run_until_complete(eval(code, ns))
    return eval(code, ns)


def run(source, filename, ns):
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    try:
        tree = ast.parse(source, filename, "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        body = compile(tree, filename, "exec", flags=TOP_LEVEL_AWAIT, dont_inherit=True)
        expr = None
        if last is not None:
            expr = compile(last, filename, "eval", flags=TOP_LEVEL_AWAIT, dont_inherit=True)
    except (SyntaxError, ValueError, OverflowError, MemoryError, RecursionError) as e:
        return {"result": "", "error": describe(e, frames=False)}
    value = None
    State.running = True
    try:
        evaluate(body, ns)
        if expr is not None:
            value = evaluate(expr, ns)
    except BaseException as e:
        State.running = False
        return {"result": "", "error": describe(e)}
    State.running = False
    if value is None:
        return {"result": "", "error": None}
    ns["_"] = value
    try:
        text = repr(value)
    except BaseException as e:
        return {"result": "", "error": describe(e)}
    if len(text) > MAX_RESULT:
        return {"result": text[:MAX_RESULT], "error": None, "truncated": True}
    return {"result": text, "error": None}


def flush_std():
    for f in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            f.flush()
        except BaseException:
            pass


def write_all(fd, data):
    while data:
        try:
            n = os.write(fd, data)
        except InterruptedError:
            continue
        except OSError:
            return
        data = data[n:]


def main():
    for fd in (3, 4):
        os.set_inheritable(fd, False)
    requests = os.fdopen(3, "rb")
    answers = os.fdopen(4, "wb", buffering=0)
    # Run as `python3 driver.py`, the first import path is the driver's
    # directory; code expects the working directory, as with python3 -c.
    sys.path[0] = ""
    sys.argv = [""]
    main_module = types.ModuleType("__main__")
    main_module.__builtins__ = builtins
    sys.modules["__main__"] = main_module
    ns = main_module.__dict__
    signal.signal(signal.SIGINT, on_sigint)
    # Until here a SIGINT would end the process: say when it no longer does.
    write_all(answers.fileno(), b'{"ready": true}\n')
    count = 0
    while True:
        line = requests.readline()
        if not line:
            return
        try:
            req = json.loads(line)
            source, mark = req["code"], req["mark"]
        except (ValueError, KeyError, TypeError):
            continue
        count += 1
        try:
            answer = run(source, "<code %d>" % count, ns)
        except BaseException as e:  # a SIGINT just as the code ended
            State.running = False
            answer = {"result": "", "error": describe(e)}
        flush_std()
        marker = ("\x1eW:%s\x1e" % mark).encode()
        write_all(1, marker)
        write_all(2, marker)
        write_all(answers.fileno(), (json.dumps(answer) + "\n").encode())


main()
