"""The seccomp-BPF allow-list the ``python_tests`` sandbox installs before any model code runs.

libseccomp (through ``pyseccomp``, a ctypes binding with libseccomp's own Python API) assembles
the program in the parent, once per process; the sandboxed interpreter only *loads* the exported
bytes with ``prctl(PR_SET_SECCOMP)`` (:mod:`evalkit.scorers.sandbox_harness`), so no BPF is
written by hand and nothing but the standard library has to be importable inside the sandbox.
The filter is inherited across ``fork`` and ``execve``: every process the code starts, however
it starts it, is filtered too.

The list starts from Docker's default profile for a process without capabilities (the syscalls
a normal program and CPython need) and leaves out everything that reaches kernel state beyond
the process: keyrings, io_uring, ptrace and cross-process memory, perf, BPF, userfaultfd, new
namespaces, mounts, module loading, kexec. What is not listed fails with ``EPERM``; ``clone3``
fails with ``ENOSYS`` so that glibc falls back to ``clone``, whose namespace flags are refused.

Examples:
    >>> {"keyctl", "io_uring_setup", "ptrace", "unshare", "mount"} & set(ALLOWED)
    set()
    >>> set(DENIED) <= set(DENIED) - set(ALLOWED)
    True
"""

from __future__ import annotations

import errno
import functools
import tempfile

# The syscalls a CPython interpreter and ordinary programs (sh, coreutils) use: Docker's default
# allow-list (moby/profiles seccomp/default.json) without the CAP_SYS_ADMIN-gated entries, plus
# clone (flags checked below) and personality (values checked below). Names unknown to this
# architecture or to this libseccomp are skipped.
ALLOWED = (
    *("accept", "accept4", "access", "alarm", "bind", "brk", "cachestat", "capget", "capset"),
    *("chdir", "chmod", "chown", "chown32", "clock_getres", "clock_getres_time64"),
    *("clock_gettime", "clock_gettime64", "clock_nanosleep", "clock_nanosleep_time64", "close"),
    *("close_range", "connect", "copy_file_range", "creat", "dup", "dup2", "dup3"),
    *("epoll_create", "epoll_create1", "epoll_ctl", "epoll_pwait", "epoll_pwait2", "epoll_wait"),
    *("eventfd", "eventfd2", "execve", "execveat", "exit", "exit_group", "faccessat"),
    *("faccessat2", "fadvise64", "fadvise64_64", "fallocate", "fchdir", "fchmod", "fchmodat"),
    *("fchmodat2", "fchown", "fchown32", "fchownat", "fcntl", "fcntl64", "fdatasync"),
    *("fgetxattr", "flistxattr", "flock", "fork", "fremovexattr", "fsetxattr", "fstat"),
    *("fstat64", "fstatat64", "fstatfs", "fstatfs64", "fsync", "ftruncate", "ftruncate64"),
    *("futex", "futex_requeue", "futex_time64", "futex_wait", "futex_waitv", "futex_wake"),
    *("futimesat", "getcpu", "getcwd", "getdents", "getdents64", "getegid", "getegid32"),
    *("geteuid", "geteuid32", "getgid", "getgid32", "getgroups", "getgroups32", "getitimer"),
    *("getpeername", "getpgid", "getpgrp", "getpid", "getppid", "getpriority", "getrandom"),
    *("getresgid", "getresgid32", "getresuid", "getresuid32", "getrlimit", "get_robust_list"),
    *("getrusage", "getsid", "getsockname", "getsockopt", "get_thread_area", "gettid"),
    *("gettimeofday", "getuid", "getuid32", "getxattr", "inotify_add_watch", "inotify_init"),
    *("inotify_init1", "inotify_rm_watch", "ioctl", "ioprio_get", "kill", "lchown", "lchown32"),
    *("lgetxattr", "link", "linkat", "listen", "listxattr", "llistxattr", "_llseek"),
    *("lremovexattr", "lseek", "lsetxattr", "lstat", "lstat64", "madvise", "membarrier"),
    *("memfd_create", "mincore", "mkdir", "mkdirat", "mknod", "mknodat", "mlock", "mlock2"),
    *("mmap", "mmap2", "mprotect", "mremap", "msync", "munlock", "munmap", "nanosleep"),
    *("newfstatat", "_newselect", "open", "openat", "openat2", "pause", "pidfd_open"),
    *("pidfd_send_signal", "pipe", "pipe2", "poll", "ppoll", "ppoll_time64", "prctl"),
    *("pread64", "preadv", "preadv2", "prlimit64", "pselect6", "pselect6_time64", "pwrite64"),
    *("pwritev", "pwritev2", "read", "readahead", "readlink", "readlinkat", "readv", "recv"),
    *("recvfrom", "recvmmsg", "recvmmsg_time64", "recvmsg", "removexattr", "rename", "renameat"),
    *("renameat2", "restart_syscall", "rmdir", "rseq", "rt_sigaction", "rt_sigpending"),
    *("rt_sigprocmask", "rt_sigqueueinfo", "rt_sigreturn", "rt_sigsuspend", "rt_sigtimedwait"),
    *("rt_sigtimedwait_time64", "rt_tgsigqueueinfo", "sched_getaffinity", "sched_getattr"),
    *("sched_getparam", "sched_get_priority_max", "sched_get_priority_min"),
    *("sched_getscheduler", "sched_rr_get_interval", "sched_setaffinity", "sched_yield"),
    *("select", "send", "sendfile", "sendfile64", "sendmmsg", "sendmsg", "sendto", "setgid"),
    *("setgroups", "setitimer", "setpgid", "setpriority", "setregid", "setresgid", "setresuid"),
    *("setreuid", "setrlimit", "set_robust_list", "setsid", "setsockopt", "set_thread_area"),
    *("set_tid_address", "setuid", "setxattr", "shutdown", "sigaltstack", "signalfd"),
    *("signalfd4", "sigprocmask", "sigreturn", "socket", "socketpair", "splice", "stat"),
    *("stat64", "statfs", "statfs64", "statx", "symlink", "symlinkat", "sync"),
    *("sync_file_range", "syncfs", "sysinfo", "tee", "tgkill", "time", "timer_create"),
    *("timer_delete", "timer_getoverrun", "timer_gettime", "timer_gettime64", "timer_settime"),
    *("timer_settime64", "timerfd_create", "timerfd_gettime", "timerfd_gettime64"),
    *("timerfd_settime", "timerfd_settime64", "times", "tkill", "truncate", "truncate64"),
    *("ugetrlimit", "umask", "uname", "unlink", "unlinkat", "utime", "utimensat"),
    *("utimensat_time64", "utimes", "vfork", "wait4", "waitid", "waitpid", "write", "writev"),
    "arch_prctl",  # x86-64 thread-local storage setup
)

# Named here so a test can check each is refused; none of them is in ALLOWED.
DENIED = (
    *("keyctl", "add_key", "request_key"),
    *("io_uring_setup", "io_uring_enter", "io_uring_register"),
    *("ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_getfd"),
    *("perf_event_open", "bpf", "userfaultfd", "unshare", "setns", "mount", "umount2"),
    *("pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsmount", "fspick"),
    *("kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module"),
    *("kcmp", "name_to_handle_at", "open_by_handle_at", "quotactl", "reboot", "swapon"),
    *("acct", "syslog", "lookup_dcookie", "clone3"),
)

_CLONE_NAMESPACES = (
    0x7E020000  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
)
_PERSONALITIES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)  # Docker's: linux, and the query


def unavailable() -> str | None:
    """Why the filter cannot be built here, or None when it can (the sandbox then fails closed)."""
    try:
        bpf_program()
    except (ImportError, OSError, RuntimeError, ValueError) as exc:
        return f"seccomp filter unavailable: {type(exc).__name__}: {exc}"
    return None


@functools.cache
def bpf_program() -> bytes:
    """The filter as raw BPF (``struct sock_filter`` entries), built once per process.

    Examples:
        >>> len(bpf_program()) % 8  # eight bytes per instruction
        0
    """
    import pyseccomp as seccomp  # lazily: only python_tests needs it

    arch = seccomp.system_arch()
    program = seccomp.SyscallFilter(seccomp.ERRNO(errno.EPERM))
    for name in ALLOWED:
        if _known(seccomp, arch, name) and name not in ("socket", "personality"):
            program.add_rule(seccomp.ALLOW, name)
    for family in (1, 2, 10):  # AF_UNIX, AF_INET, AF_INET6: no netlink, packet or vsock sockets
        program.add_rule(seccomp.ALLOW, "socket", seccomp.Arg(0, seccomp.EQ, family))
    for persona in _PERSONALITIES:
        program.add_rule(seccomp.ALLOW, "personality", seccomp.Arg(0, seccomp.EQ, persona))
    namespaces = seccomp.Arg(0, seccomp.MASKED_EQ, _CLONE_NAMESPACES, 0)
    program.add_rule(seccomp.ALLOW, "clone", namespaces)
    if _known(seccomp, arch, "clone3"):  # flags live in a struct the filter cannot read
        program.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    with tempfile.TemporaryFile() as out:  # libseccomp writes to a file descriptor
        program.export_bpf(out)
        out.seek(0)
        return out.read()


def _known(seccomp: object, arch: int, name: str) -> bool:
    # -1 is __NR_SCMP_ERROR: a name libseccomp does not know. Other negative numbers are its
    # pseudo-syscalls (a name of another architecture), which rules accept and ignore.
    return seccomp.resolve_syscall(arch, name) != -1  # type: ignore[attr-defined]
