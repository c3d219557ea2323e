"""``sframe record``: stacks unwound in the kernel by an eBPF program, from SFrame tables
held in BPF maps (no stack copies, no frame pointers needed). Linux only, x86-64 first;
root, or CAP_BPF and CAP_PERFMON.

:mod:`.bpf_sys` (the system calls), :mod:`.asm` (an eBPF assembler), :mod:`.ringbuf`
(reading the ring buffer), :mod:`.sampler` (the program run at each sample).
"""
