"""The harness that runs inside the sandbox (:mod:`evalkit.scorers.sandbox`): the model's code and
the case's tests under an audit hook, the result reported with the per-run nonce.

It is executed as ``python -I -c <this file's text>`` in the child and never imported by evalkit
itself; it imports nothing of evalkit (the child sees only the standard library).
"""

import _thread
import gc
import json
import os
import sys
import threading
import types


def _call(box, fn, args):
    try:
        box.append(("ok", fn(*args)))
    except MemoryError:
        box.append(("memory", None))
    except BaseException as exc:
        try:
            detail = str(exc)
        except BaseException:
            detail = ""
        try:
            name = str(type(exc).__name__)
        except BaseException:
            name = "exception"
        box.append(("raised", exc, (name + ": " + detail if detail else name)[:200]))


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
    get_ident, main_ident = _thread.get_ident, _thread.get_ident()
    traceback_of = BaseException.__traceback__.__get__

    def report(status, **fields):
        reserve.clear()
        gc.collect()
        fields["status"] = status
        fields["nonce"] = nonce
        os.write(result_fd, (json.dumps(fields) + "\n").encode())
        os._exit(0)

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

    def hook(event, args):
        if get_ident() == main_ident:
            return  # the main thread runs only the harness
        if event == "open":
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
    sys.addaudithook(hook)

    def run(fn, *args):
        box = []
        worker = threading.Thread(target=_call, args=(box, fn, args), daemon=True)
        worker.start()
        worker.join()
        if blocked:
            report("blocked", message=blocked[0])
        if not box or box[0][0] == "memory":
            module.__dict__.clear()
            report("memory")
        return box[0]

    def describe(outcome, filename):
        _, exc, text = outcome
        tb, found = traceback_of(exc), None
        while tb is not None:  # C-level attributes only: no code of the model's runs here
            if tb.tb_frame.f_code.co_filename == filename:
                found = tb.tb_lineno
            tb = tb.tb_next
        if found is None:
            return text
        lines = sources[filename]
        quoted = lines[found - 1].strip() if 0 < found <= len(lines) else ""
        return text + (" at line %s: %s" % (found, quoted))[:200]

    outcome = run(exec, code, module.__dict__)
    if outcome[0] == "raised":
        report("crash", message=describe(outcome, "solution.py"))
    entry = payload["entry"]
    if entry and not callable(module.__dict__.get(entry)):
        report("entry", message="code does not define %s()" % entry)
    namespace = {k: v for k, v in module.__dict__.items() if not k.startswith("__")}
    namespace["__name__"] = "tests"
    outcome = run(exec, tests, namespace)
    if outcome[0] == "raised":
        report("crash", message="the tests raised on import: " + describe(outcome, "tests.py"))
    passed, failed = [], []
    names = payload["names"]
    if names is None:
        names = [n for n, f in namespace.items() if n.startswith("test_") and callable(f)]
    for name in names:
        fn = namespace.get(name)
        if type(fn) is not types.FunctionType:
            failed.append((name, "not a function"))
            continue
        outcome = run(fn)
        if outcome[0] == "ok":
            passed.append(name)
        else:
            failed.append((name, describe(outcome, "tests.py")))
    report("ok", passed=passed, failed=failed)


if __name__ == "__main__":  # run as `python -I -c`; importing it runs nothing
    main()
