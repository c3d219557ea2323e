"""The kernel's user unwinder on each machine: what ``kernel/unwind/user.c`` takes from the
architecture (the series' x86 code, Jens Remus's s390 patches and his arm64 ones).

- x86-64: the return address is on the stack; the frame-pointer method is ``rbp``'s
  chain (CFA = FP + 16), or CFA = SP + 8 at a function's first instruction (``push
  %rbp`` or ``endbr64`` there).
- AArch64: the topmost frame's return address may still be in the link register (x30:
  ``unwind_user_get_ra_reg``), SP at the call is SP at entry; the frame-pointer method
  follows the AAPCS64 frame records (x29 points at the saved x29 and x30: CFA = FP +
  16). Return addresses signed by pointer authentication (pac-ret) are stripped of
  their code, a row's mangled-RA bit saying so, and always in a frame record, whose
  saved x30 may be signed whatever its function's table says (as the arm64 perf
  callchain does with ``ptrauth_strip_user_insn_pac``; the posted arm64 patches name
  PAC support as still to come).
- s390x: the topmost frame's return address may still be in r14, the CFA is SP + 160 at
  the call (the caller's SP = CFA - 160), words are big-endian. There is no usable
  frame pointer (the ABI fixes neither the register nor the save slots); the fallback is
  the back chain (``-mbackchain``): the word at SP is the caller's SP, 0 in the
  outermost frame; the return address is r14's slot of the caller's register save
  area (caller's SP + 112), and the caller's FP is unknown (0).
"""

from __future__ import annotations

from ..format.constants import ABI
from ..format.lookup import Rule as ValueRule
from ..format.lookup import RuleKind
from ..records import record_class
from ..unwind.step import S390X_R14_SLOT, Policy, Rule

#: The kernel's word.
WORD = 8
#: s390x: the frame a call allocates at least (the register save area and back chain).
S390X_FRAME = 160


@record_class(frozen=True)
class KernelArch:
    """One machine as the kernel's user unwinder sees it."""

    abi: ABI
    policy: Policy
    #: ``struct`` byte order of the machine's words.
    byteorder: str
    #: The highest user address plus one (TASK_SIZE).
    user_limit: int
    #: How the fallback for code without SFrame finds the caller: "frame pointer"
    #: (x86-64's rbp chain), "frame record" (AArch64) or "back chain" (s390x).
    fallback: str
    #: The fallback's rule (None: computed per frame, the s390x back chain).
    fallback_rule: Rule | None


def _frame_pointer_rule(abi: ABI, mangled: bool) -> Rule:
    """CFA = FP + 16, RA at CFA - 8, FP at CFA - 16: rbp's chain and AArch64's records."""
    policy = Policy.kernel(abi)
    return Rule(policy.fp_reg, 2 * WORD, ValueRule(RuleKind.CFA, -WORD, deref=True),
                ValueRule(RuleKind.CFA, -2 * WORD, deref=True), ra_mangled=mangled,
                frame_pointer=True)


def _arches() -> dict[ABI, KernelArch]:
    amd64, aarch64, s390x = (ABI.AMD64_ENDIAN_LITTLE, ABI.AARCH64_ENDIAN_LITTLE,
                             ABI.S390X_ENDIAN_BIG)
    return {
        # TASK_SIZE_MAX: one page below 2^47.
        amd64: KernelArch(amd64, Policy.kernel(amd64), "<", (1 << 47) - 4096,
                          "frame pointer", _frame_pointer_rule(amd64, False)),
        # 48-bit user addresses (the common VA_BITS).
        aarch64: KernelArch(aarch64, Policy.kernel(aarch64), "<", 1 << 48, "frame record",
                            _frame_pointer_rule(aarch64, True)),
        # Four-level translation: 8 PiB.
        s390x: KernelArch(s390x, Policy.kernel(s390x), ">", 1 << 53, "back chain", None),
    }


ARCHES = _arches()


def kernel_arch(abi: ABI) -> KernelArch:
    """The machine of ``abi`` (AArch64 big-endian: not a machine Linux runs user space
    of with SFrame; refused)."""
    found = ARCHES.get(abi)
    if found is None:
        raise ValueError(f"no kernel user unwinder for {abi.name}")
    return found


def back_chain_rule(sp: int, caller_sp: int) -> Rule:
    """The s390x back-chain step as a rule of the frame at ``sp`` whose back chain holds
    ``caller_sp``: CFA = SP + (caller_sp - sp + 160), RA in r14's slot of the caller's
    save area; FP: the caller's cannot be known (the walk sets it to 0)."""
    cfa_offset = caller_sp - sp + S390X_FRAME
    return Rule(15, cfa_offset, ValueRule(RuleKind.CFA, S390X_R14_SLOT - S390X_FRAME, deref=True),
                ValueRule(RuleKind.RETAIN), frame_pointer=True)
