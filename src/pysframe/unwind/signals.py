"""Signal frames of each architecture: the sigreturn trampolines a signal handler returns
into, and where the interrupted context lies on the stack at that return.

A handler returns to a trampoline that calls ``rt_sigreturn`` (``sigreturn`` for s390x
handlers installed without ``SA_SIGINFO``); at that return the stack pointer is the
signal frame the kernel (or qemu-user, which lays it out the same way) pushed, and the
interrupted registers are read from it:

* x86-64: glibc's ``__restore_rt`` (``mov $15, %rax; syscall``); ``ucontext`` at SP,
  its ``mcontext`` general registers 40 bytes in (gdb: ``amd64_linux_sigcontext_addr``).
* AArch64: ``mov x8, #139; svc #0`` (the vdso's ``__kernel_rt_sigreturn``, qemu's
  trampoline page); ``rt_sigframe`` = ``siginfo`` (128 bytes) + ``ucontext``, whose
  ``sigcontext`` lies 176 bytes in: ``fault_address``, x0-x30, sp, pc (gdb:
  ``AARCH64_RT_SIGFRAME_UCONTEXT_OFFSET`` 128, ``AARCH64_UCONTEXT_SIGCONTEXT_OFFSET``
  176, ``AARCH64_SIGCONTEXT_XO_OFFSET`` 8).
* s390x: ``svc 173`` (rt_sigreturn) or ``svc 119`` (sigreturn). ``rt_sigframe`` = the
  160-byte register save area, 8 bytes (the old ``svc`` slot), ``siginfo`` (128) and
  ``ucontext``, whose ``_sigregs`` (PSW mask, PSW address, r0-r15) follow uc_flags,
  uc_link and uc_stack (40 bytes); the plain ``sigframe`` holds a pointer to its
  ``_sigregs`` at 160 + 8 (``sigcontext.sregs``).
"""

from __future__ import annotations

from ..format.constants import ABI
from ..records import NamedTuple
from .memory import StackReader

#: x86-64 rt_sigreturn trampoline (glibc's __restore_rt): mov $15,%rax; syscall.
X86_64_SIGRETURN = bytes.fromhex("48c7c00f0000000f05")
#: AArch64: mov x8, #139 (__NR_rt_sigreturn); svc #0.
AARCH64_SIGRETURN = bytes.fromhex("681180d2010000d4")
#: s390x: svc 173 (__NR_rt_sigreturn), svc 119 (__NR_sigreturn).
S390X_RT_SIGRETURN = bytes.fromhex("0aad")
S390X_SIGRETURN = bytes.fromhex("0a77")

#: The trampolines of each architecture; a SigreturnPlan's ``kind`` is the index here.
TRAMPOLINES: dict[ABI, tuple[bytes, ...]] = {
    ABI.AMD64_ENDIAN_LITTLE: (X86_64_SIGRETURN,),
    ABI.AARCH64_ENDIAN_LITTLE: (AARCH64_SIGRETURN,),
    ABI.S390X_ENDIAN_BIG: (S390X_RT_SIGRETURN, S390X_SIGRETURN),
}

_X86_64_GREGS = 40
_X86_64_GREG = {"r8": 0, "r9": 1, "r10": 2, "r11": 3, "r12": 4, "r13": 5, "r14": 6, "r15": 7,
                "rdi": 8, "rsi": 9, "rbp": 10, "rbx": 11, "rdx": 12, "rax": 13, "rcx": 14,
                "rsp": 15, "rip": 16}
_X86_64_DWARF = {"rax": 0, "rdx": 1, "rcx": 2, "rbx": 3, "rsi": 4, "rdi": 5, "rbp": 6,
                 "rsp": 7, **{f"r{n}": n for n in range(8, 16)}}
_AARCH64_REGS = 128 + 176 + 8
_S390X_RT_SIGREGS = 160 + 8 + 128 + 40
_S390X_SIGREGS_POINTER = 160 + 8


class Interrupted(NamedTuple):
    """The registers of the frame a signal interrupted: pc, sp, fp, the link register
    (0: none) and all general registers by DWARF number."""

    pc: int
    sp: int
    fp: int
    lr: int
    others: dict[int, int]


def interrupted(abi: ABI, kind: int, sp: int, memory: StackReader) -> Interrupted | None:
    """The interrupted frame's registers from the signal frame at ``sp`` (the SP at the
    return into trampoline ``kind``); None when the context is unreadable."""
    if abi is ABI.AMD64_ENDIAN_LITTLE:
        values = _words(memory, sp + _X86_64_GREGS, 17)
        if values is None:
            return None
        named = {name: values[index] for name, index in _X86_64_GREG.items()}
        others = {number: named[name] for name, number in _X86_64_DWARF.items()}
        return Interrupted(named["rip"], named["rsp"], named["rbp"], 0, others)
    if abi.is_aarch64:
        values = _words(memory, sp + _AARCH64_REGS, 33)  # x0-x30, sp, pc
        if values is None:
            return None
        return Interrupted(values[32], values[31], values[29], values[30],
                           dict(enumerate(values[:32])))
    if abi.is_s390x:
        sigregs: int | None = sp + _S390X_RT_SIGREGS
        if kind == 1:
            sigregs = memory.read(sp + _S390X_SIGREGS_POINTER)
        if sigregs is None:
            return None
        values = _words(memory, sigregs + 8, 17)  # PSW address, r0-r15
        if values is None:
            return None
        gprs = values[1:]
        return Interrupted(values[0], gprs[15], gprs[11], gprs[14], dict(enumerate(gprs)))
    return None


def _words(memory: StackReader, address: int, count: int) -> list[int] | None:
    values = []
    for index in range(count):
        value = memory.read(address + 8 * index)
        if value is None:
            return None
        values.append(value)
    return values
