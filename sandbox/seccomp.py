"""The shipped seccomp profile: deny by default, allow what Python data analysis uses.

`sandbox/seccomp.json` is generated from this module (`python -m sbx.sandbox.seccomp`)
and a test keeps the two identical, so the profile an operator reads is the one
we reviewed. Left out on purpose, because data analysis never needs them and each
is kernel attack surface or a way around the other controls:

    debugging and cross-process memory: ptrace, process_vm_readv/writev, kcmp, pidfd_getfd
    kernel keyrings: keyctl, add_key, request_key
    page-fault handling and tracing: userfaultfd, perf_event_open, bpf
    namespaces and mounts: unshare, setns, mount, umount2, pivot_root, chroot, open_tree,
        move_mount, fsopen, fsconfig, fsmount, fspick, mount_setattr
        (clone is allowed only without CLONE_NEW* flags; clone3 answers ENOSYS)
    io_uring: io_uring_setup, io_uring_enter, io_uring_register
    host administration: acct, swapon, swapoff, reboot, kexec_load, kexec_file_load,
        init_module, finit_module, delete_module, iopl, ioperm, quotactl, syslog,
        settimeofday, clock_settime, clock_adjtime, adjtimex, vhangup
    file handles and NUMA policy: name_to_handle_at, open_by_handle_at, mbind,
        set_mempolicy, get_mempolicy, move_pages, migrate_pages
    others: fanotify_init, memfd_secret, process_madvise, lookup_dcookie, uselib, ustat,
        sysfs, _sysctl; personality only with the harmless values below

Measured: pandas, numpy, scipy, matplotlib, seaborn, scikit-learn (n_jobs=2),
statsmodels, pyarrow and openpyxl workloads, subprocesses, threads and a
multiprocessing pool all run under it (tests/test_seccomp.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ALLOWED = """
accept accept4 access alarm arch_prctl bind brk capget capset chdir chmod chown clock_getres
clock_getres_time64 clock_gettime clock_gettime64 clock_nanosleep clock_nanosleep_time64 close
close_range connect copy_file_range creat dup dup2 dup3 epoll_create epoll_create1 epoll_ctl
epoll_ctl_old epoll_pwait epoll_pwait2 epoll_wait epoll_wait_old eventfd eventfd2 execve
execveat exit exit_group faccessat faccessat2 fadvise64 fadvise64_64 fallocate fchdir fchmod
fchmodat fchown fchown32 fchownat fcntl fcntl64 fdatasync fgetxattr flistxattr flock fork
fremovexattr fsetxattr fstat fstat64 fstatat64 fstatfs fstatfs64 fsync ftruncate ftruncate64
futex futex_time64 futex_waitv futimesat getcpu getcwd getdents getdents64 getegid getegid32
geteuid geteuid32 getgid getgid32 getgroups getgroups32 getitimer getpeername getpgid getpgrp
getpid getppid getpriority getrandom getresgid getresgid32 getresuid getresuid32 getrlimit
get_robust_list getrusage getsid getsockname getsockopt get_thread_area gettid gettimeofday
getuid getuid32 getxattr inotify_add_watch inotify_init inotify_init1 inotify_rm_watch io_cancel
ioctl io_destroy io_getevents io_pgetevents io_pgetevents_time64 ioprio_get io_setup io_submit
kill lchown lchown32 lgetxattr link linkat listen listxattr llistxattr _llseek lremovexattr
lseek lsetxattr lstat lstat64 madvise membarrier memfd_create mincore mkdir mkdirat mknod
mknodat mlock mlock2 mlockall mmap mmap2 mprotect mq_getsetattr mq_notify mq_open
mq_timedreceive mq_timedreceive_time64 mq_timedsend mq_timedsend_time64 mq_unlink mremap msgctl
msgget msgrcv msgsnd msync munlock munlockall munmap nanosleep newfstatat _newselect open openat
openat2 pause pidfd_open pidfd_send_signal pipe pipe2 poll ppoll ppoll_time64 prctl pread64
preadv preadv2 prlimit64 pselect6 pselect6_time64 pwrite64 pwritev pwritev2 read readahead
readlink readlinkat readv recv recvfrom recvmmsg recvmmsg_time64 recvmsg remap_file_pages
removexattr rename renameat renameat2 restart_syscall rmdir rseq rt_sigaction rt_sigpending
rt_sigprocmask rt_sigqueueinfo rt_sigreturn rt_sigsuspend rt_sigtimedwait rt_sigtimedwait_time64
rt_tgsigqueueinfo sched_getaffinity sched_getattr sched_getparam sched_get_priority_max
sched_get_priority_min sched_getscheduler sched_rr_get_interval sched_rr_get_interval_time64
sched_setaffinity sched_setattr sched_setparam sched_setscheduler sched_yield seccomp select
semctl semget semop semtimedop semtimedop_time64 send sendfile sendfile64 sendmmsg sendmsg
sendto setfsgid setfsgid32 setfsuid setfsuid32 setgid setgid32 setgroups setgroups32 setitimer
setpgid setpriority setregid setregid32 setresgid setresgid32 setresuid setresuid32 setreuid
setreuid32 setrlimit set_robust_list setsid setsockopt set_thread_area set_tid_address setuid
setuid32 setxattr shmat shmctl shmdt shmget shutdown sigaltstack signalfd signalfd4 sigprocmask
sigreturn socket socketcall socketpair splice stat stat64 statfs statfs64 statx symlink
symlinkat sync sync_file_range syncfs sysinfo tee tgkill time timer_create timer_delete
timer_getoverrun timer_gettime timer_gettime64 timer_settime timer_settime64 timerfd_create
timerfd_gettime timerfd_gettime64 timerfd_settime timerfd_settime64 times tkill truncate
truncate64 ugetrlimit umask uname unlink unlinkat utime utimensat utimensat_time64 utimes vfork
wait4 waitid write writev
""".split()

CLONE_NAMESPACE_FLAGS = 0x7E020000
"""CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET."""
SAFE_PERSONALITIES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)
"""PER_LINUX, PER_LINUX32, UNAME26 variants, and the query value."""
ENOSYS = 38
EPERM = 1


def build_profile() -> dict[str, Any]:
    """The profile as Docker's seccomp JSON format expects it."""
    return {
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": EPERM,
        "archMap": [
            {
                "architecture": "SCMP_ARCH_X86_64",
                "subArchitectures": ["SCMP_ARCH_X86", "SCMP_ARCH_X32"],
            },
            {"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": ["SCMP_ARCH_ARM"]},
        ],
        "syscalls": [
            {"names": sorted(set(ALLOWED)), "action": "SCMP_ACT_ALLOW"},
            {
                "names": ["clone"],
                "action": "SCMP_ACT_ALLOW",
                "args": [
                    {
                        "index": 0,
                        "value": CLONE_NAMESPACE_FLAGS,
                        "valueTwo": 0,
                        "op": "SCMP_CMP_MASKED_EQ",
                    }
                ],
                "comment": "threads and processes, but no new namespaces",
            },
            {
                "names": ["clone3"],
                "action": "SCMP_ACT_ERRNO",
                "errnoRet": ENOSYS,
                "comment": "its flags live in memory seccomp cannot read; libc falls back to clone",
            },
            *[
                {
                    "names": ["personality"],
                    "action": "SCMP_ACT_ALLOW",
                    "args": [{"index": 0, "value": value, "valueTwo": 0, "op": "SCMP_CMP_EQ"}],
                }
                for value in SAFE_PERSONALITIES
            ],
        ],
    }


def render_profile() -> str:
    """The JSON text written to `sandbox/seccomp.json`."""
    return json.dumps(build_profile(), indent=1) + "\n"


if __name__ == "__main__":
    Path(__file__).with_name("seccomp.json").write_text(render_profile())
