# sandboxd's pre-started Python interpreter: run as `python3 -c THIS
# MODULE...` in a pooled container, before any untrusted code is in it. It
# imports the recipe's modules, then waits on fd 3 for its program (see
# prestart.go) and runs it as `python3 PATH ARGS...` would, in __main__.
# Everything is local to one function: __main__'s namespace is the
# program's, cleared before it runs, and no module beyond those already
# loaded at start-up is imported here.
def _prestart():
    import sys
    import os

    own = sys._getframe().f_code
    for name in sys.argv[1:]:
        try:
            __import__(name)
        except Exception:
            pass  # the program meets the same error if it imports it
    # An interpreter's first compile sets its parser up: 1.1-1.7 ms, mostly
    # page faults. A fresh `python3 PATH` pays it before its program runs
    # too; here it is paid before the task comes.
    compile(b"pass\n", "<prestart>", "exec", dont_inherit=True)
    # What is loaded now stays loaded: the program's collections, and the
    # one at its end, need not walk it (numpy and pandas: ~20 ms each).
    had_gc = "gc" in sys.modules
    import gc

    gc.freeze()
    if not had_gc:
        del sys.modules["gc"]
    del gc
    data = []
    while True:
        chunk = os.read(3, 1 << 16)
        if not chunk:
            break
        data.append(chunk)
    os.close(3)
    if not data:
        os._exit(0)  # no program came: the container is ending
    fields = b"".join(data).split(b"\0")
    argc = int(fields[1])
    argv = [os.fsdecode(a) for a in fields[2 : 2 + argc]]
    os.environb.clear()
    for kv in fields[2 + argc :]:
        key, _, value = kv.partition(b"=")
        if key:
            os.environb[key] = value
    os.chdir(fields[0])
    path = argv[1]
    sys.argv = argv[1:]
    sys.orig_argv = argv
    sys.path[0] = os.path.dirname(os.path.realpath(path))

    main = sys.modules["__main__"]
    scope = main.__dict__
    builtins = scope["__builtins__"]
    loader = sys.modules["_frozen_importlib_external"].SourceFileLoader("__main__", path)
    scope.clear()
    scope.update(
        __name__="__main__",
        __doc__=None,
        __package__=None,
        __loader__=loader,
        __spec__=None,
        __annotations__={},
        __builtins__=builtins,
        __file__=path,
        __cached__=None,
    )
    status = 0
    try:
        with open(path, "rb") as f:
            source = f.read()
        code = compile(source, path, "exec", dont_inherit=True)
        exec(code, scope)
    except SystemExit as e:
        # As the interpreter ends on SystemExit: None is 0, an int its
        # value, anything else printed on stderr and 1.
        if e.code is None:
            status = 0
        elif isinstance(e.code, int):
            status = e.code & 0xFF
        else:
            print(e.code, file=sys.stderr)
            status = 1
    except BaseException as e:
        # As an uncaught exception ends `python3 PATH`: the program's
        # frames only (not this one), through its excepthook, exit code 1,
        # or 130 (128+SIGINT) for KeyboardInterrupt.
        tb = e.__traceback__
        if tb is not None and tb.tb_frame.f_code is own:
            tb = tb.tb_next
        e.__traceback__ = tb
        sys.excepthook(type(e), e, tb)
        status = 130 if isinstance(e, KeyboardInterrupt) else 1
        del e, tb
    # What the interpreter's finalization does that a program can see:
    # wait for its threads, run its atexit functions, finalize its
    # globals' objects (a __del__, a file left unflushed), flush stdio.
    # Tearing down every pre-imported module (~65 ms for numpy and
    # pandas) is not: the process exits without it.
    threading = sys.modules.get("threading")
    if threading is not None:
        threading._shutdown()
    import atexit
    import gc

    atexit._run_exitfuncs()
    scope.clear()
    gc.collect()
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(status)


_prestart()
