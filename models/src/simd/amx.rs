//! AMX: what the CPU says (`cpuid`) and whether the OS lets this process
//! use the tile registers (Linux: `arch_prctl(ARCH_REQ_XCOMP_PERM)`).

use std::sync::OnceLock;

/// `cpuid` leaf 7, sub-leaf 0, EDX: AMX-BF16 (bit 22), AMX-TILE (bit
/// 24) and AMX-INT8 (bit 25).
const AMX_BF16_TILE: u32 = (1 << 22) | (1 << 24) | (1 << 25);

/// Whether the tile unit with bf16 and int8 products may be used by
/// this process; the permission is asked for once.
pub(super) fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| cpu_has_amx() && os_permits())
}

#[cfg(target_arch = "x86_64")]
fn cpu_has_amx() -> bool {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    __cpuid(0).eax >= 7 && __cpuid_count(7, 0).edx & AMX_BF16_TILE == AMX_BF16_TILE
}

#[cfg(not(target_arch = "x86_64"))]
fn cpu_has_amx() -> bool {
    false
}

/// Linux gives a process the tile registers' state only on request
/// (the state is 8 KiB per thread): `arch_prctl(ARCH_REQ_XCOMP_PERM,
/// XFEATURE_XTILEDATA)`. The permission is per process and lasts for
/// its life; a kernel that does not know the request answers with an
/// error, and then the path is unavailable.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn os_permits() -> bool {
    const SYS_ARCH_PRCTL: i64 = 158;
    const ARCH_REQ_XCOMP_PERM: i64 = 0x1023;
    const XFEATURE_XTILEDATA: i64 = 18;
    let ret: i64;
    // SAFETY: the system call takes two integers, touches no memory of
    // this process and only extends what the process may do; `rcx` and
    // `r11` are clobbered by `syscall` and declared so.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") SYS_ARCH_PRCTL => ret,
            in("rdi") ARCH_REQ_XCOMP_PERM,
            in("rsi") XFEATURE_XTILEDATA,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret == 0
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn os_permits() -> bool {
    false
}
