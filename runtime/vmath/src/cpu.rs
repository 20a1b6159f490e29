//! The process's instruction-set cap: the one place every kernel dispatch of the host
//! runtime asks which CPU features it may use ("every x86-64 server": a cap of `avx2`
//! makes an AVX-512 or AMX host run the code an AVX2-only server would).
//!
//! The cap is a [`Level`], set by `HLOC_ISA` in the environment (`amx`, `avx512-bf16`,
//! `avx512`, `avx2` or `native`, any case) or by [`set_cap`] before the first dispatch,
//! and decided once per process. The level a dispatcher uses is [`effective`]:
//! `min(cap, host)`, the host's being what [`host`] detects.
//!
//! The dispatch points that obey it: `hlo-kernels`' AMX bf16 GEMM (only at [`Level::Amx`])
//! and small-GEMM loop (its AVX2 build wherever the host has AVX2, the floor of every
//! cap), this crate's vector math ([`crate::isa`]: AVX-512 only at [`Level::Avx512`] and
//! above), and `hlo-runtime`'s Cranelift flags (every `has_avx512*` off below
//! [`Level::Avx512`]). The `gemm` crate picks its own AVX-512 or FMA kernels inside private
//! modules and cannot be capped from outside: an f32 GEMM on the crate keeps using
//! AVX-512 under a cap of `avx2` on an AVX-512 host, and says so in the reported paths.
//!
//! [`Level::Avx512Bf16`] gates nothing yet (no kernel uses `vdpbf16ps`, measured slower
//! than f32 FMAs per multiply-add, see `hlo-kernels`' `bf16_gemm`); it is a level so that
//! a cap can name a Zen 4/Cooper Lake-class server exactly.

use std::fmt;
use std::sync::OnceLock;

/// An instruction-set level, ordered: each includes the ones below it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// x86-64 without AVX2 (or another architecture): portable code only. Never a cap,
    /// only what such a host detects as.
    Base,
    /// AVX2 and FMA (Haswell and later, every x86-64 server of the last decade): the floor.
    Avx2,
    /// AVX-512 F, VL and DQ (Skylake-SP, Zen 4 and later).
    Avx512,
    /// AVX-512 with AVX512-BF16 (Cooper Lake, Zen 4 and later).
    Avx512Bf16,
    /// AMX-TILE and AMX-BF16 with the OS's tile state (Sapphire Rapids and later).
    Amx,
}

impl Level {
    /// The level's name as `HLOC_ISA` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Level::Base => "base",
            Level::Avx2 => "avx2",
            Level::Avx512 => "avx512",
            Level::Avx512Bf16 => "avx512-bf16",
            Level::Amx => "amx",
        }
    }

    /// Every level a cap can name, lowest first.
    pub const CAPS: [Level; 4] = [Level::Avx2, Level::Avx512, Level::Avx512Bf16, Level::Amx];
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A cap that could not be set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CapError {
    /// `HLOC_ISA` (or a string given to [`parse`]) names no level.
    Invalid(String),
    /// [`set_cap`] asked for a cap other than the one this process already decided on
    /// (set earlier, or read from `HLOC_ISA` by a first dispatch).
    AlreadyDecided {
        /// The cap in force (`None`: native).
        decided: Option<Level>,
        /// The cap asked for.
        asked: Option<Level>,
    },
}

impl fmt::Display for CapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = |c: &Option<Level>| c.map_or("native", Level::name);
        match self {
            CapError::Invalid(v) => write!(
                f,
                "HLOC_ISA={v:?} names no instruction-set level (use amx, avx512-bf16, avx512, avx2 or native)"
            ),
            CapError::AlreadyDecided { decided, asked } => write!(
                f,
                "the instruction-set cap is already {} in this process; it cannot become {}",
                name(decided),
                name(asked)
            ),
        }
    }
}

impl std::error::Error for CapError {}

/// The environment variable that sets the cap.
pub const ENV: &str = "HLOC_ISA";

/// `value` as a cap: `Some(level)`, or `None` for `native` (no cap). Case-insensitive;
/// surrounding whitespace ignored; `_` is read as `-`.
pub fn parse(value: &str) -> Result<Option<Level>, CapError> {
    let v = value.trim().to_ascii_lowercase().replace('_', "-");
    Ok(Some(match v.as_str() {
        "native" => return Ok(None),
        "amx" => Level::Amx,
        "avx512-bf16" | "avx512bf16" => Level::Avx512Bf16,
        "avx512" => Level::Avx512,
        "avx2" => Level::Avx2,
        _ => return Err(CapError::Invalid(value.to_string())),
    }))
}

/// The process's cap, decided once: by [`set_cap`] or else from `HLOC_ISA` (unset or
/// empty: native).
static CAP: OnceLock<Result<Option<Level>, CapError>> = OnceLock::new();

fn from_env() -> Result<Option<Level>, CapError> {
    match std::env::var(ENV) {
        Ok(v) if v.trim().is_empty() => Ok(None),
        Ok(v) => parse(&v),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => {
            Err(CapError::Invalid(v.to_string_lossy().into_owned()))
        }
    }
}

/// The cap in force (`None`: native), decided on first call from `HLOC_ISA` unless
/// [`set_cap`] came first; an invalid `HLOC_ISA` is this error on every call.
pub fn cap() -> Result<Option<Level>, CapError> {
    CAP.get_or_init(from_env).clone()
}

/// Sets the cap (`None`: native) for the rest of the process, overriding `HLOC_ISA`.
/// Works before the first dispatch (or [`cap`]/[`effective`] call); afterwards it
/// succeeds only if it asks for the cap already decided.
pub fn set_cap(level: Option<Level>) -> Result<(), CapError> {
    let decided = CAP.get_or_init(|| Ok(level));
    match decided {
        Ok(d) if *d == level => Ok(()),
        Ok(d) => Err(CapError::AlreadyDecided { decided: *d, asked: level }),
        // An invalid HLOC_ISA was already read: the cap asked for cannot replace it.
        Err(_) => Err(CapError::AlreadyDecided { decided: None, asked: level }),
    }
}

/// The highest level this host has (CPU and OS), detected once.
pub fn host() -> Level {
    static HOST: OnceLock<Level> = OnceLock::new();
    *HOST.get_or_init(detect)
}

#[cfg(target_arch = "x86_64")]
fn detect() -> Level {
    use std::arch::is_x86_feature_detected as has;
    if !(has!("avx2") && has!("fma")) {
        return Level::Base;
    }
    if !(has!("avx512f") && has!("avx512vl") && has!("avx512dq")) {
        return Level::Avx2;
    }
    // Leaf 7 exists on any CPU with AVX2.
    let (l7, l71) =
        (std::arch::x86_64::__cpuid_count(7, 0), std::arch::x86_64::__cpuid_count(7, 1));
    if l71.eax & (1 << 5) == 0 {
        return Level::Avx512;
    }
    let amx_bf16 = l7.edx & (1 << 22) != 0;
    let amx_tile = l7.edx & (1 << 24) != 0;
    // The OS enables the tile configuration and data state (XCR0 bits 17, 18); AVX-512
    // detection above already established OSXSAVE.
    // SAFETY: OSXSAVE is set (AVX-512 was detected, which requires it).
    let xcr0 = unsafe { std::arch::x86_64::_xgetbv(0) };
    if amx_bf16 && amx_tile && xcr0 & (0b11 << 17) == 0b11 << 17 {
        Level::Amx
    } else {
        Level::Avx512Bf16
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> Level {
    Level::Base
}

/// The level dispatchers use: `min(cap, host)`. An invalid `HLOC_ISA` counts as native
/// here (with one warning on stderr): the runtime refuses to compile under it
/// (`hlo-runtime`'s compile reports [`cap`]'s error) and the `hloc` CLI exits at startup,
/// so only direct users of the kernel crates run on.
pub fn effective() -> Level {
    static EFFECTIVE: OnceLock<Level> = OnceLock::new();
    *EFFECTIVE.get_or_init(|| match cap() {
        Ok(c) => c.map_or(host(), |c| c.min(host())),
        Err(e) => {
            eprintln!("warning: {e}; using the host's native instruction set");
            host()
        }
    })
}

/// Whether dispatchers may use `level`'s instructions (`level <= effective()`).
pub fn allows(level: Level) -> bool {
    level <= effective()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_parses_and_others_are_refused() {
        for (s, l) in [
            ("amx", Some(Level::Amx)),
            ("AMX", Some(Level::Amx)),
            ("avx512-bf16", Some(Level::Avx512Bf16)),
            ("AVX512_BF16", Some(Level::Avx512Bf16)),
            ("avx512bf16", Some(Level::Avx512Bf16)),
            ("Avx512", Some(Level::Avx512)),
            (" avx2 ", Some(Level::Avx2)),
            ("native", None),
            ("NATIVE", None),
        ] {
            assert_eq!(parse(s), Ok(l), "{s:?}");
        }
        for bad in ["", "avx", "sse4", "base", "avx-512", "avx2 avx512", "x86-64-v3"] {
            let e = parse(bad).expect_err(bad);
            assert_eq!(e, CapError::Invalid(bad.to_string()));
            assert!(e.to_string().contains("HLOC_ISA"), "{e}");
        }
        for l in Level::CAPS {
            assert_eq!(parse(l.name()), Ok(Some(l)), "a level's name parses back");
        }
    }

    #[test]
    fn levels_are_ordered_lowest_first() {
        let all = [Level::Base, Level::Avx2, Level::Avx512, Level::Avx512Bf16, Level::Amx];
        assert!(all.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(Level::Amx.min(Level::Avx512), Level::Avx512);
    }

    /// The effective level is `min(cap, host)` for the cap this test process runs under
    /// (`HLOC_ISA`, as CI sets it), and the vector math follows it.
    #[test]
    fn effective_is_the_cap_bounded_by_the_host() {
        let cap = from_env().expect("a valid HLOC_ISA in the test environment");
        assert_eq!(effective(), cap.map_or(host(), |c| c.min(host())));
        let expect = match effective() {
            Level::Base => crate::Isa::Base,
            Level::Avx2 => crate::Isa::Avx2,
            _ => crate::Isa::Avx512,
        };
        assert_eq!(crate::isa(), expect);
        // A second decision is refused unless it repeats the first.
        assert_eq!(set_cap(cap), Ok(()));
        let other = if cap == Some(Level::Avx2) { Some(Level::Avx512) } else { Some(Level::Avx2) };
        assert_eq!(set_cap(other), Err(CapError::AlreadyDecided { decided: cap, asked: other }));
    }
}
