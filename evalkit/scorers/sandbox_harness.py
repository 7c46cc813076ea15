"""The harness that runs inside the sandbox (:mod:`evalkit.scorers.sandbox`): the model's code and
the case's tests under an audit hook, the result reported with the per-run nonce.

It is executed as ``python -I -c <this file's text>`` in the child and never imported by evalkit
itself; it imports nothing of evalkit (the child sees only the standard library).

The main thread holds the nonce and the result; the model's code runs only in worker threads.
The code shares the interpreter, so the main thread must never run any of it: everything it
calls once the code has run is bound before (the code may replace module attributes and
builtins), it reads only exact ``str``/``tuple`` values the workers hand back and keeps every
object of the code's alive (a finalizer would run where the last reference dies). The audit
hook refuses, on every thread, new audit hooks (a hook runs on whatever thread raises an
event), tracing and profiling, and any frame whose chain reaches the harness's own functions
or passes through a generator or coroutine (resumed on another thread later, its frame's
callers would be that thread's).
"""

import _json
import _thread
import gc
import json
import os
import sys
import types

_CO_SUSPENDABLE = 0x20 | 0x80 | 0x100 | 0x200  # generator, coroutine, iterable coroutine, async
_FRAME_ATTRIBUTES = ("tb_frame", "gi_frame", "cr_frame", "ag_frame")


def _text(value):
    """An exact ``str`` copy of a ``str`` (a subclass's methods never run on the main thread)."""
    return "".join(("", value)) if isinstance(value, str) else ""


def _call(box, done, fn, args, describe):
    """Worker thread: ``fn(*args)`` into ``box`` as ("ok", value), ("memory",) or
    ("raised", one line); ``done`` released whatever happens."""
    try:
        try:
            box.append(("ok", fn(*args)))
        except MemoryError:
            box.append(("memory",))
        except BaseException as exc:
            box.append(("raised", describe(exc)))
    finally:
        done.release()


def _exception_line(exc, frame_files, sources):
    """``Name: message at line N: source`` for an exception of the code or its tests, the
    line being the last one of ``sources``' files the traceback passes through."""
    try:
        detail = str(exc)
    except BaseException:
        detail = ""
    try:
        name = str(type(exc).__name__)
    except BaseException:
        name = "exception"
    text = _text((name + ": " + detail if detail else name)[:200])
    for filename, line in reversed(frame_files(exc)):
        lines = sources.get(filename)
        if lines is not None:
            quoted = lines[line - 1].strip() if 0 < line <= len(lines) else ""
            return text + _text((" at line %s: %s" % (line, quoted))[:200])
    return text


def _namespace(module_dict, entry):
    """The tests' globals: the code's names (dunders left out), and whether ``entry`` is
    defined and callable."""
    if entry and not callable(module_dict.get(entry)):
        return None
    namespace = {k: v for k, v in module_dict.items() if not k.startswith("__")}
    namespace["__name__"] = "tests"
    return namespace


def _test_names(namespace):
    names = [n for n, f in namespace.items() if n.startswith("test_") and callable(f)]
    return [_text(n) for n in names]


def _run_test(namespace, name):
    fn = namespace.get(name)
    if type(fn) is not types.FunctionType:
        raise TypeError("not a function")
    fn()


def confine(program_hex, keyctl_number):
    """Leave the runner's session keyring for a new, empty one, then load the seccomp filter
    (assembled by libseccomp in the parent): from here on, and in everything this process
    starts, the denied system calls fail. An error here means the code must not run."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    join_session_keyring = 1  # KEYCTL_JOIN_SESSION_KEYRING, with no name: a new anonymous one
    if libc.syscall(ctypes.c_long(keyctl_number), join_session_keyring, None) < 0:
        return "cannot leave the session keyring: " + os.strerror(ctypes.get_errno())
    program = bytes.fromhex(program_hex)
    code = ctypes.create_string_buffer(program, len(program))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(program) // 8, ctypes.addressof(code))
    pr_set_no_new_privs, pr_set_seccomp, seccomp_mode_filter = 38, 22, 2
    if libc.prctl(pr_set_no_new_privs, 1, 0, 0, 0) != 0:
        return "cannot set no_new_privs: " + os.strerror(ctypes.get_errno())
    if libc.prctl(pr_set_seccomp, seccomp_mode_filter, ctypes.byref(fprog), 0, 0) != 0:
        return "cannot load the seccomp filter: " + os.strerror(ctypes.get_errno())
    return None


def main():
    raw = sys.stdin.buffer.read()
    payload = json.loads(raw)
    del raw
    os.close(0)
    nonce = payload.pop("nonce")
    result_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    confined = None if len(sys.argv) < 3 else confine(sys.argv[1], int(sys.argv[2]))
    root = os.path.realpath(os.getcwd())
    blocked = []
    reserve = [bytearray(1 << 20)]
    kept = []  # every object the code handed back: none of them dies on the main thread
    # What the main thread calls once the code has run, bound now (see the module docstring).
    write, exit_now, collect, quote = os.write, os._exit, gc.collect, _json.encode_basestring_ascii
    start_thread, new_lock = _thread.start_new_thread, _thread.allocate_lock
    get_ident = _thread.get_ident
    type_of, str_type, tuple_type, list_type = type, str, tuple, list
    call, exception_line = _call, _exception_line
    namespace_of, test_names, run_test = _namespace, _test_names, _run_test
    traceback_frame = types.TracebackType.tb_frame.__get__
    traceback_next = types.TracebackType.tb_next.__get__
    traceback_line = types.TracebackType.tb_lineno.__get__
    traceback_of = BaseException.__traceback__.__get__
    fetching = set()  # threads inside the hook's (or frame_files') own frame reads

    def encode(value):
        if type_of(value) is str_type:
            return quote(value)
        if type_of(value) is tuple_type or type_of(value) is list_type:
            return "[" + ", ".join([encode(item) for item in value]) + "]"
        return "null"

    def report(status, **fields):
        reserve.clear()
        collect()
        if blocked and status != "blocked":  # refused while the report was being made
            status, fields = "blocked", {"message": blocked[0]}
        fields["status"] = status
        fields["nonce"] = nonce
        line = ", ".join([quote(key) + ": " + encode(value) for key, value in fields.items()])
        write(result_fd, ("{" + line + "}\n").encode())
        exit_now(0)

    root_device = os.stat(root).st_dev

    def outside(path, dir_fd=None):
        if isinstance(path, int):
            return False
        path = os.fsdecode(os.fspath(path))
        base = os.getcwd()
        if isinstance(dir_fd, int) and dir_fd >= 0 and not os.path.isabs(path):
            try:
                base = os.readlink("/proc/self/fd/%d" % dir_fd)
            except OSError:  # no /proc in the sandbox: its one writable device is the temp dir
                return os.fstat(dir_fd).st_dev != root_device
        real = os.path.realpath(os.path.join(base, path))
        return real != root and not real.startswith(root + os.sep) and real != "/dev/null"

    def secret(path):
        """A file of /proc that exposes a process's memory or environment, however spelled
        (relative to any directory, through /proc/self, /proc/thread-self, symlinks)."""
        real = os.path.realpath(os.path.join(os.getcwd(), os.fsdecode(path)))
        return real.startswith("/proc/") and real.rstrip("/").rsplit("/", 1)[-1] in secret_files

    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    # event -> ((index of a path written, index of its dir_fd or None), ...)
    writes = {
        "os.remove": ((0, 1),),
        "os.rmdir": ((0, 1),),
        "os.mkdir": ((0, 2),),
        "os.chmod": ((0, 2),),
        "os.chown": ((0, 3),),
        "os.utime": ((0, 3),),
        "os.truncate": ((0, None),),
        "os.setxattr": ((0, None),),
        "os.removexattr": ((0, None),),
        "os.chflags": ((0, None),),
        "os.lchflags": ((0, None),),
        "os.rename": ((0, 2), (1, 3)),
        "os.link": ((1, 3),),
        "os.symlink": ((1, 2),),
        "shutil.rmtree": ((0, 1),),
        "shutil.chown": ((0, None),),
        "shutil.copyfile": ((1, None),),
        "shutil.copymode": ((1, None),),
        "shutil.copystat": ((1, None),),
        "shutil.copytree": ((1, None),),
        "shutil.move": ((0, None), (1, None)),
        "shutil.make_archive": ((0, None),),
        "sqlite3.connect": ((0, None),),
    }
    addressed = {"socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg"}
    net = addressed | {
        "socket.getaddrinfo",
        "socket.gethostbyname",
        "socket.gethostbyname_ex",
        "socket.gethostbyaddr",
        "socket.getnameinfo",
    }
    spawn = {
        "subprocess.Popen",
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
        "pty.spawn",
        "os.kill",
        "os.killpg",
        "os.startfile",
    }
    introspect = {
        "sys.addaudithook",
        "sys._setprofileallthreads",
        "sys._settraceallthreads",
        "sys.monitoring.register_callback",
        "sys._current_frames",
        "sys._current_exceptions",
        "sys.settrace",
        "sys.setprofile",
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
    }
    secret_files = ("mem", "environ", "map_files", "pagemap")

    def refuse(message):
        blocked.append(message)
        raise PermissionError("evalkit sandbox: " + message)

    def frame_problem(frame):
        """Why handing out ``frame`` would let the code reach the harness, or None."""
        fetching.add(get_ident())
        try:
            while frame is not None:
                code = frame.f_code
                if code in protected:
                    return "a frame of the harness"
                if code.co_flags & _CO_SUSPENDABLE:
                    return "a generator's or coroutine's frame"
                frame = frame.f_back
            return None
        finally:
            fetching.discard(get_ident())

    def held_frame(holder, name):
        fetching.add(get_ident())
        try:
            return getattr(holder, name, None)
        finally:
            fetching.discard(get_ident())

    def hook(event, args):
        if event == "object.__getattr__":
            if get_ident() in fetching or args[1] not in _FRAME_ATTRIBUTES:
                return  # the hook's own reads, or not a frame
            if args[1] != "tb_frame":  # a generator's frame runs wherever it is resumed
                refuse("introspection blocked: %s" % args[1])
            problem = frame_problem(held_frame(args[0], args[1]))
            if problem is not None:
                refuse("introspection blocked: %s (tb_frame)" % problem)
        elif event == "sys._getframe":
            problem = frame_problem(args[0])
            if problem is not None:
                refuse("introspection blocked: %s (sys._getframe)" % problem)
        elif event == "open":
            path, mode, flags = args
            if isinstance(path, (str, bytes)) and secret(path):
                refuse("introspection blocked: %s" % os.fsdecode(path))
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & write_flags
            )
            if writing and outside(path):
                refuse("write outside sandbox blocked: %s" % os.fsdecode(os.fspath(path)))
            # The event does not carry os.open's dir_fd, so a directory handle from outside could
            # aim a relative write anywhere: handles on outside directories are refused.
            if not writing and outside(path) and os.path.isdir(path):
                refuse("write outside sandbox blocked: directory handle %s" % os.fsdecode(path))
        elif event in writes:
            for at, fd_at in writes[event]:
                path = args[at] if at < len(args) else None
                if path is None or (event == "sqlite3.connect" and path in (":memory:", "")):
                    continue
                dir_fd = args[fd_at] if fd_at is not None and fd_at < len(args) else None
                if outside(path, dir_fd):
                    shown = path if isinstance(path, int) else os.fsdecode(os.fspath(path))
                    refuse("write outside sandbox blocked: %s (%s)" % (shown, event))
        elif event in net:
            target = args[1] if event in addressed else args[0]
            if isinstance(target, tuple):
                target = ":".join(str(part) for part in target[:2])
            refuse("network access blocked: %s %s" % (event, target))
        elif event in spawn:
            refuse("process spawning blocked: %s" % event)
        elif event.startswith("ctypes."):
            refuse("native code blocked: %s" % event)
        elif event in introspect:
            refuse("introspection blocked: %s" % event)

    def frame_files(exc):
        """(file name, line) of each entry of ``exc``'s traceback, read with the hook told."""
        entries, tb = [], traceback_of(exc)
        fetching.add(get_ident())
        try:
            while tb is not None:
                name = traceback_frame(tb).f_code.co_filename
                if type_of(name) is str_type:
                    entries.append((name, traceback_line(tb)))
                tb = traceback_next(tb)
        finally:
            fetching.discard(get_ident())
        return entries

    def code_objects(code):
        found = {code}
        for const in code.co_consts:
            if type_of(const) is types.CodeType:
                found |= code_objects(const)
        return found

    protected = code_objects(main.__code__)

    if confined is not None:
        report("unavailable", message=confined)
    try:
        code = compile(payload["code"], "solution.py", "exec")
    except (SyntaxError, ValueError) as exc:
        line, why = getattr(exc, "lineno", "?"), getattr(exc, "msg", str(exc))
        report("syntax", message="line %s: %s" % (line, why))
    tests = compile(payload["tests"], "tests.py", "exec")
    sources = {
        "solution.py": payload["code"].splitlines(),
        "tests.py": payload["tests"].splitlines(),
    }
    module = types.ModuleType("solution")
    module.__file__ = os.path.join(root, "solution.py")
    sys.modules["solution"] = module
    entry, names = payload["entry"], payload["names"]
    del payload

    def describe(exc, where=None):
        return exception_line(exc, frame_files, {where: sources[where]} if where else sources)

    def run(fn, *args, where=None):
        """``fn(*args)`` in a worker thread: ("ok", value) or ("raised", line); a refusal or
        an exhausted memory ends the run here."""
        box, done = [], new_lock()
        kept.append((box, fn, args))
        done.acquire()
        try:
            start_thread(call, (box, done, fn, args, lambda exc: describe(exc, where)))
        except BaseException:  # (not a model object) no thread to be had: the task budget
            report("memory", message="cannot start a thread")
        done.acquire()
        if blocked:
            report("blocked", message=blocked[0])
        outcome = box[0] if box else None
        kept.append(outcome)
        if type_of(outcome) is tuple_type and outcome and type_of(outcome[0]) is str_type:
            if outcome[0] == "ok" and outcome[1:]:
                return outcome
            if outcome[0] == "raised" and outcome[1:] and type_of(outcome[1]) is str_type:
                return outcome
        report("memory")

    sys.addaudithook(hook)
    outcome = run(exec, code, module.__dict__, where="solution.py")
    if outcome[0] == "raised":
        report("crash", message=outcome[1])
    outcome = run(namespace_of, module.__dict__, entry)
    if outcome[0] == "raised":
        report("crash", message=outcome[1])
    namespace = outcome[1]
    if namespace is None:
        report("entry", message="code does not define %s()" % entry)
    outcome = run(exec, tests, namespace, where="tests.py")
    if outcome[0] == "raised":
        report("crash", message="the tests raised on import: " + outcome[1])
    if names is None:
        outcome = run(test_names, namespace)
        names = outcome[1] if outcome[0] == "ok" else []
    passed, failed = [], []
    for name in names:
        kept.append(name)
        outcome = run(run_test, namespace, name, where="tests.py")
        if outcome[0] == "ok":
            passed.append(name)
        else:
            failed.append((name, outcome[1]))
    report("ok", passed=passed, failed=failed)


if __name__ == "__main__":  # run as `python -I -c`; importing it runs nothing
    main()
