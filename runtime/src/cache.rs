//! The shape-keyed compilation cache, generic over what a compile produces.
//!
//! - [`module_fingerprint`]: a 128-bit fingerprint of a module's *canonical form*
//!   ([`canonical_text`]): the printed module with every instruction and computation
//!   renamed by position and metadata dropped. Renaming instructions or computations and
//!   editing `metadata={...}` (and the stack-frame tables it points into) keep the
//!   fingerprint; anything the printer prints that can change what the program computes or
//!   how it is called changes it: opcodes, shapes with layouts, attributes, operand order,
//!   constants, control edges, called-computation structure, the entry signature and
//!   `entry_computation_layout`, `input_output_alias`, shardings, `backend_config` and
//!   frontend attributes (kept: a spurious miss costs a compile, a spurious hit runs the
//!   wrong code). The hash is FNV-1a-128 ([`Fnv128`]), written out here, so a fingerprint
//!   is the same in every process and with every Rust version.
//! - [`CacheKey`]: module fingerprint + argument shapes + a fingerprint of the compile
//!   options, with a stable byte encoding ([`CacheKey::to_bytes`]) and a file-name-safe
//!   hex name ([`CacheKey::hex_name`]).
//! - [`CompileCache`]: the in-memory cache, `Send + Sync`; [`CompileCache::get_or_compile`]
//!   compiles each key once (concurrent callers of a key being compiled wait for it), counts
//!   hits, misses and compile time ([`CacheStats`]), explains every miss against the
//!   nearest entry compiled before ([`Miss`], [`MissReason`]) and warns when one module
//!   has been compiled for too many argument shapes ([`RecompileWarning`]).
//! - [`DiskCache`]: a persistent cache of byte payloads, one file per key, written
//!   atomically; damaged, truncated or foreign files are reported as
//!   [`DiskCacheError::Corrupt`] (never a panic) so the caller recompiles and overwrites.
//! - [`bucket`] and [`pad_dim`]: the remedy for shape churn: round a dynamic size up to one
//!   of a few buckets and pad the tensor, with a mask telling real rows from padding.
//!
//! Nothing here knows what a compiled payload is: the executor decides what `T` is, what
//! bytes it stores on disk, and what goes into the options fingerprint (the backend, its
//! version and flags, so that a payload never outlives the compiler that made it).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::fs;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use hlo_ir::{Module, Shape, Tensor, TensorError};

// ---- fingerprints ----

/// A 128-bit fingerprint (FNV-1a-128). Displays as 32 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Fingerprint(pub u128);

impl Fingerprint {
    /// The fingerprint of `bytes`.
    pub fn of(bytes: &[u8]) -> Fingerprint {
        let mut h = Fnv128::new();
        h.write(bytes);
        h.finish()
    }
    /// 32 lowercase hex digits.
    pub fn to_hex(self) -> String {
        format!("{:032x}", self.0)
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

/// FNV-1a with the 128-bit parameters of the FNV reference (offset basis
/// 0x6c62272e07bb014262b821756295c58d, prime 2^88 + 0x13b). Not cryptographic: it guards
/// against accidents (renamed modules, flipped bits), not against an adversary.
#[derive(Clone, Debug)]
pub struct Fnv128(u128);

impl Fnv128 {
    const OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;

    pub fn new() -> Fnv128 {
        Fnv128(Self::OFFSET)
    }
    pub fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u128::from(b)).wrapping_mul(Self::PRIME);
        }
    }
    pub fn finish(&self) -> Fingerprint {
        Fingerprint(self.0)
    }
}

impl Default for Fnv128 {
    fn default() -> Fnv128 {
        Fnv128::new()
    }
}

/// The first line of [`canonical_text`]; bumped whenever the canonical form changes, so
/// old fingerprints (and disk entries keyed by them) stop matching.
pub const CANONICAL_VERSION: &str = "hlo-canonical v1";

/// The canonical form [`module_fingerprint`] hashes: [`CANONICAL_VERSION`], the module's
/// `entry_computation_layout` (as [`Module::entry_layout`] reports it), then the module
/// printed by `hlo_ir::text::print` with the module named `m`, computations named `c0..`
/// in print order (callees first, the entry last), instructions named `v0..` in print
/// order across the module (definitions first, ties by creation order), and no metadata
/// or stack-frame tables. Every other printed attribute stays.
pub fn canonical_text(m: &Module) -> String {
    let mut c = m.clone();
    c.name = "m".into();
    c.frames = None;
    // Renaming counts as an edit, after which the module derives its layout from the entry;
    // the layout as the original reports it goes on a line of its own instead.
    c.header.entry_layout = None;
    c.header.entry_layout_span = None;
    let order = c.post_order();
    // Two phases: fresh `x.<id>` names (all with a dot) first, so that the dotless `v<k>`
    // names of the second phase never meet a name still to be replaced.
    for &id in &order {
        let comp = c.comp_mut(id);
        for n in comp.post_order() {
            comp.rename(n, "x");
        }
    }
    let mut k = 0usize;
    for (j, &id) in order.iter().enumerate() {
        let comp = c.comp_mut(id);
        comp.name = format!("c{j}");
        for n in comp.post_order() {
            comp.set_name(n, &format!("v{k}")).expect("after the first phase every name has a dot");
            comp.instr_mut(n).metadata = None;
            k += 1;
        }
    }
    let mut out = String::with_capacity(m.instr_count() * 64 + 256);
    out.push_str(CANONICAL_VERSION);
    out.push('\n');
    if let Some((params, result)) = m.entry_layout() {
        out.push_str("entry_computation_layout=(");
        for (i, p) in params.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            p.write(&mut out, true);
        }
        out.push_str(")->");
        result.write(&mut out, true);
        out.push('\n');
    }
    out.push_str(&hlo_ir::text::print(&c));
    out
}

/// The fingerprint of [`canonical_text`]: equal for modules that differ only in names and
/// metadata, different (but for a 2^-128 accident) when anything else differs.
pub fn module_fingerprint(m: &Module) -> Fingerprint {
    Fingerprint::of(canonical_text(m).as_bytes())
}

// ---- keys ----

/// What a compiled program depends on: the module (by fingerprint), the shapes of the
/// arguments it is called with, and the compile options (by fingerprint; the caller hashes
/// whatever changes the generated code).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CacheKey {
    pub module: Fingerprint,
    pub args: Vec<Shape>,
    pub options: Fingerprint,
}

impl CacheKey {
    /// Version byte of [`Self::to_bytes`].
    pub const ENCODING_VERSION: u8 = 1;

    /// A key; argument arrays without a layout get the default row-major one (what a host
    /// [`Tensor`] is), so `f32[8,128]` and `f32[8,128]{1,0}` are one key.
    pub fn new(module: Fingerprint, args: Vec<Shape>, options: Fingerprint) -> CacheKey {
        CacheKey { module, args: args.iter().map(Shape::with_default_layouts).collect(), options }
    }

    #[cfg(test)]
    /// The key for calling the module with these tensors.
    pub fn for_tensors(module: Fingerprint, args: &[Tensor], options: Fingerprint) -> CacheKey {
        CacheKey::new(module, args.iter().map(Tensor::shape).collect(), options)
    }

    /// The stable encoding: version byte, module and options fingerprints (16 bytes each,
    /// little-endian), the argument count (u32 LE), then each argument's shape as printed
    /// with layouts (`f32[8,128]{1,0}`), prefixed by its byte length (u32 LE).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(37 + self.args.len() * 24);
        b.push(Self::ENCODING_VERSION);
        b.extend_from_slice(&self.module.0.to_le_bytes());
        b.extend_from_slice(&self.options.0.to_le_bytes());
        b.extend_from_slice(&(self.args.len() as u32).to_le_bytes());
        let mut s = String::new();
        for a in &self.args {
            s.clear();
            a.write(&mut s, true);
            b.extend_from_slice(&(s.len() as u32).to_le_bytes());
            b.extend_from_slice(s.as_bytes());
        }
        b
    }

    /// The fingerprint of [`Self::to_bytes`].
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of(&self.to_bytes())
    }

    /// [`Self::fingerprint`] as 32 hex digits: the key's file name in a [`DiskCache`].
    pub fn hex_name(&self) -> String {
        self.fingerprint().to_hex()
    }
}

/// `module <hex> args (f32[8,128]{1,0}, s32[]) options <hex>`.
impl fmt::Display for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "module {} args (", self.module)?;
        for (i, a) in self.args.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{a}")?;
        }
        write!(f, ") options {}", self.options)
    }
}

// ---- the in-memory cache ----

/// Why a lookup missed, against the nearest entry compiled before. Each displays as one
/// line of [`Miss::explanation`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MissReason {
    /// `first compile of this program`: nothing comparable was compiled before.
    FirstCompile,
    /// `module changed`: the program (by the name given to
    /// the runtime's compile call) was compiled before from another module.
    ModuleChanged,
    /// `compile options changed`.
    OptionsChanged,
    /// `3 params now, 2 before`.
    ParamCount {
        /// Parameters now.
        now: usize,
        /// Parameters of the nearest earlier compile.
        before: usize,
    },
    /// `param 0: f32[8,128] now, f32[4,128] before` (layouts shown only when they are
    /// the difference).
    Param {
        /// The parameter's position.
        index: usize,
        /// Its shape now.
        now: Shape,
        /// Its shape in the nearest earlier compile.
        before: Shape,
    },
}

impl fmt::Display for MissReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MissReason::FirstCompile => f.write_str("first compile of this program"),
            MissReason::ModuleChanged => f.write_str("module changed"),
            MissReason::OptionsChanged => f.write_str("compile options changed"),
            MissReason::ParamCount { now, before } => {
                write!(f, "{now} params now, {before} before")
            }
            MissReason::Param { index, now, before } => {
                let layouts = shape_text(now, false) == shape_text(before, false);
                write!(
                    f,
                    "param {index}: {} now, {} before",
                    shape_text(now, layouts),
                    shape_text(before, layouts)
                )
            }
        }
    }
}

fn shape_text(s: &Shape, layouts: bool) -> String {
    let mut out = String::new();
    s.write(&mut out, layouts);
    out
}

/// One module compiled for more distinct argument-shape sets than the configured limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecompileWarning {
    /// The module's fingerprint.
    pub module: Fingerprint,
    /// Distinct argument-shape sets compiled for the module so far.
    pub distinct: usize,
}

impl fmt::Display for RecompileWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "recompiled for {} distinct argument shapes: consider padding to buckets (see `bucket`)",
            self.distinct
        )
    }
}

/// A miss: why, what the compile cost, and a warning when the module keeps recompiling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Miss {
    /// Never empty.
    pub reasons: Vec<MissReason>,
    /// What the compile took.
    pub compile_time: Duration,
    /// Set when the module keeps recompiling for new shapes.
    pub warning: Option<RecompileWarning>,
}

impl Miss {
    /// The reasons, one per line (no trailing newline).
    pub fn explanation(&self) -> String {
        self.reasons.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n")
    }
}

/// The explanation, then `compile time: 12.3 ms`, then `warning: ...` when there is one.
impl fmt::Display for Miss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.explanation())?;
        write!(f, "compile time: {}", format_duration(self.compile_time))?;
        if let Some(w) = &self.warning {
            write!(f, "\nwarning: {w}")?;
        }
        Ok(())
    }
}

fn format_duration(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{:.1} ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{:.2} s", d.as_secs_f64())
    }
}

/// What a lookup in the compilation cache did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// Served from the cache (possibly after waiting for another thread compiling the key).
    Hit,
    /// Compiled by this call.
    Miss(Miss),
}

impl Outcome {
    /// Whether the lookup was served from the cache.
    pub fn is_hit(&self) -> bool {
        matches!(self, Outcome::Hit)
    }
    /// The miss, when the lookup compiled.
    pub fn miss(&self) -> Option<&Miss> {
        match self {
            Outcome::Miss(m) => Some(m),
            Outcome::Hit => None,
        }
    }
}

/// Counters since the cache was created. `hits + misses` is the number of lookups.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups served from an entry, including those that waited for a concurrent compile.
    pub hits: u64,
    /// Of the hits, those that waited for another thread compiling the same key.
    pub waits: u64,
    /// Lookups that ran the compile function.
    pub misses: u64,
    /// Compiles that succeeded (entries created); `misses - compiles` failed.
    pub compiles: u64,
    /// Wall time spent in compile functions, failed ones included.
    pub compile_time: Duration,
}

/// The default of [`CompileCache::with_recompile_limit`].
pub const DEFAULT_RECOMPILE_LIMIT: usize = 8;

/// An in-memory map from [`CacheKey`] to compiled payloads (`Arc<T>`), safe to share
/// between threads. Entries live as long as the cache (no eviction).
pub struct CompileCache<T> {
    inner: Mutex<Inner<T>>,
    compiled: Condvar,
    recompile_limit: usize,
}

struct Inner<T> {
    ready: HashMap<CacheKey, Arc<T>>,
    compiling: HashSet<CacheKey>,
    /// Every successful compile in order, with the program name it was asked under.
    history: Vec<(CacheKey, Option<String>)>,
    shape_sets: HashMap<Fingerprint, HashSet<Vec<Shape>>>,
    stats: CacheStats,
}

impl<T> Default for CompileCache<T> {
    fn default() -> CompileCache<T> {
        CompileCache::new()
    }
}

impl<T> fmt::Debug for CompileCache<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompileCache")
            .field("entries", &self.len())
            .field("stats", &self.stats())
            .finish()
    }
}

impl<T> CompileCache<T> {
    /// An empty cache that warns past [`DEFAULT_RECOMPILE_LIMIT`] argument-shape sets.
    pub fn new() -> CompileCache<T> {
        CompileCache::with_recompile_limit(DEFAULT_RECOMPILE_LIMIT)
    }

    /// An empty cache whose misses carry a [`RecompileWarning`] once one module has been
    /// compiled for more than `limit` distinct argument-shape sets.
    pub fn with_recompile_limit(limit: usize) -> CompileCache<T> {
        CompileCache {
            inner: Mutex::new(Inner {
                ready: HashMap::new(),
                compiling: HashSet::new(),
                history: Vec::new(),
                shape_sets: HashMap::new(),
                stats: CacheStats::default(),
            }),
            compiled: Condvar::new(),
            recompile_limit: limit,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner<T>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[cfg(test)]
    /// The entry for `key`, without counting a lookup.
    pub fn get(&self, key: &CacheKey) -> Option<Arc<T>> {
        self.lock().ready.get(key).cloned()
    }

    pub fn len(&self) -> usize {
        self.lock().ready.len()
    }

    pub fn stats(&self) -> CacheStats {
        self.lock().stats
    }

    #[cfg(test)]
    /// Distinct argument-shape sets compiled for `module` (under any options).
    pub fn distinct_arg_sets(&self, module: Fingerprint) -> usize {
        self.lock().shape_sets.get(&module).map_or(0, HashSet::len)
    }

    #[cfg(test)]
    /// The entry for `key`, compiled by `compile` on a miss. `compile` runs without the
    /// cache locked; a concurrent call for the same key waits for it and is a hit. A failed
    /// (or panicking) compile caches nothing: waiters then compile themselves.
    pub fn get_or_compile<E>(
        &self,
        key: &CacheKey,
        compile: impl FnOnce() -> Result<T, E>,
    ) -> Result<(Arc<T>, Outcome), E> {
        self.lookup(None, key, compile)
    }

    /// [`Self::get_or_compile`] for a program the caller names (a file path, the module's
    /// name): a miss whose module fingerprint was never compiled but whose `program` was is
    /// explained as `module changed` against that program's last compile.
    pub fn get_or_compile_named<E>(
        &self,
        program: &str,
        key: &CacheKey,
        compile: impl FnOnce() -> Result<T, E>,
    ) -> Result<(Arc<T>, Outcome), E> {
        self.lookup(Some(program), key, compile)
    }

    fn lookup<E>(
        &self,
        program: Option<&str>,
        key: &CacheKey,
        compile: impl FnOnce() -> Result<T, E>,
    ) -> Result<(Arc<T>, Outcome), E> {
        let mut g = self.lock();
        let mut waited = false;
        loop {
            if let Some(v) = g.ready.get(key) {
                let v = v.clone();
                g.stats.hits += 1;
                g.stats.waits += u64::from(waited);
                return Ok((v, Outcome::Hit));
            }
            if !g.compiling.contains(key) {
                break;
            }
            waited = true;
            g = self.compiled.wait(g).unwrap_or_else(PoisonError::into_inner);
        }
        g.stats.misses += 1;
        let reasons = explain(&g.history, program, key);
        g.compiling.insert(key.clone());
        drop(g);

        let in_flight = InFlight { cache: self, key };
        let start = Instant::now();
        let result = compile();
        let compile_time = start.elapsed();

        let mut g = self.lock();
        g.stats.compile_time += compile_time;
        let value = match result {
            Ok(v) => Arc::new(v),
            Err(e) => {
                drop(g);
                drop(in_flight);
                return Err(e);
            }
        };
        g.stats.compiles += 1;
        g.ready.insert(key.clone(), value.clone());
        g.history.push((key.clone(), program.map(str::to_string)));
        let limit = self.recompile_limit;
        let set = g.shape_sets.entry(key.module).or_default();
        let new_shapes = set.insert(key.args.clone());
        let distinct = set.len();
        let warning = (new_shapes && distinct > limit)
            .then_some(RecompileWarning { module: key.module, distinct });
        in_flight.finish(&mut g);
        drop(g);
        self.compiled.notify_all();
        Ok((value, Outcome::Miss(Miss { reasons, compile_time, warning })))
    }
}

/// A key being compiled; dropping it (on failure or unwinding) releases the key and wakes
/// the waiters.
struct InFlight<'a, T> {
    cache: &'a CompileCache<T>,
    key: &'a CacheKey,
}

impl<T> InFlight<'_, T> {
    fn finish(self, g: &mut Inner<T>) {
        g.compiling.remove(self.key);
        std::mem::forget(self);
    }
}

impl<T> Drop for InFlight<'_, T> {
    fn drop(&mut self) {
        self.cache.lock().compiling.remove(self.key);
        self.cache.compiled.notify_all();
    }
}

/// The reasons `key` missed, against the nearest earlier compile: of the same module and
/// options, else of the same module, else of the same named program; the nearest is the
/// one with the fewest differing arguments, the latest on a tie.
fn explain(
    history: &[(CacheKey, Option<String>)],
    program: Option<&str>,
    key: &CacheKey,
) -> Vec<MissReason> {
    let nearest = |pred: &dyn Fn(&CacheKey, Option<&str>) -> bool| {
        history
            .iter()
            .rev()
            .filter(|(k, p)| pred(k, p.as_deref()))
            .min_by_key(|(k, _)| arg_diffs(&key.args, &k.args).len())
            .map(|(k, _)| k)
    };
    let mut reasons = Vec::new();
    let before =
        if let Some(k) = nearest(&|k, _| k.module == key.module && k.options == key.options) {
            k
        } else if let Some(k) = nearest(&|k, _| k.module == key.module) {
            reasons.push(MissReason::OptionsChanged);
            k
        } else if let Some(k) = program.and_then(|name| nearest(&|_, p| p == Some(name))) {
            reasons.push(MissReason::ModuleChanged);
            if k.options != key.options {
                reasons.push(MissReason::OptionsChanged);
            }
            k
        } else {
            return vec![MissReason::FirstCompile];
        };
    reasons.extend(arg_diffs(&key.args, &before.args));
    if reasons.is_empty() {
        // Unreachable for a real miss (the key would have been found); kept total.
        reasons.push(MissReason::FirstCompile);
    }
    reasons
}

fn arg_diffs(now: &[Shape], before: &[Shape]) -> Vec<MissReason> {
    let mut d = Vec::new();
    if now.len() != before.len() {
        d.push(MissReason::ParamCount { now: now.len(), before: before.len() });
    }
    for (index, (n, b)) in now.iter().zip(before).enumerate() {
        if n != b {
            d.push(MissReason::Param { index, now: n.clone(), before: b.clone() });
        }
    }
    d
}

// ---- the disk cache ----

/// First bytes of every [`DiskCache`] entry.
pub const DISK_MAGIC: [u8; 8] = *b"HLOCACHE";
/// Version of the entry layout; an entry of another version is [`DiskCacheError::Corrupt`].
pub const DISK_FORMAT_VERSION: u32 = 1;
/// File extension of entries.
pub const DISK_EXTENSION: &str = "hlocache";

/// Why [`DiskCache`] could not load or store an entry.
#[derive(Debug)]
pub enum DiskCacheError {
    /// The file system refused (permissions, disk full, ...).
    Io { path: PathBuf, source: io::Error },
    /// The entry exists but cannot be trusted (truncated, damaged, another key, another
    /// format): recompile and [`DiskCache::store`] over it.
    Corrupt { path: PathBuf, why: String },
}

impl DiskCacheError {
    pub fn is_corrupt(&self) -> bool {
        matches!(self, DiskCacheError::Corrupt { .. })
    }
}

impl fmt::Display for DiskCacheError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DiskCacheError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            DiskCacheError::Corrupt { path, why } => {
                write!(f, "{}: corrupt cache entry: {why}", path.display())
            }
        }
    }
}

impl std::error::Error for DiskCacheError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DiskCacheError::Io { source, .. } => Some(source),
            DiskCacheError::Corrupt { .. } => None,
        }
    }
}

/// A directory of compiled payloads, one file per key: `<dir>/<key.hex_name()>.hlocache`.
///
/// Entry layout (integers little-endian): [`DISK_MAGIC`] (8 bytes), [`DISK_FORMAT_VERSION`]
/// (u32), the key's length (u32) and bytes ([`CacheKey::to_bytes`], so a file under the
/// wrong name is caught), the payload's length (u64), an FNV-1a-128 checksum of everything
/// before it and of the payload (16 bytes), then the payload. Entries are written to a
/// temporary file in the same directory and renamed into place, so a reader sees a whole
/// entry or none, and concurrent writers of one key leave one of their entries.
#[derive(Clone, Debug)]
pub struct DiskCache {
    dir: PathBuf,
}

const HEADER_FIXED: usize = 8 + 4 + 4;
const TRAILER_FIXED: usize = 8 + 16;

impl DiskCache {
    /// A cache in `dir`; the directory is created by the first [`Self::store`].
    pub fn new(dir: impl Into<PathBuf>) -> DiskCache {
        DiskCache { dir: dir.into() }
    }

    /// Where `key`'s entry lives.
    pub fn path_of(&self, key: &CacheKey) -> PathBuf {
        self.dir.join(format!("{}.{DISK_EXTENSION}", key.hex_name()))
    }

    /// The payload stored for `key`; `None` when there is no entry.
    pub fn load(&self, key: &CacheKey) -> Result<Option<Vec<u8>>, DiskCacheError> {
        let path = self.path_of(key);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(DiskCacheError::Io { path, source }),
        };
        match decode(bytes, &key.to_bytes()) {
            Ok(payload) => Ok(Some(payload)),
            Err(why) => Err(DiskCacheError::Corrupt { path, why }),
        }
    }

    /// Stores `payload` for `key`, replacing any entry (atomically).
    pub fn store(&self, key: &CacheKey, payload: &[u8]) -> Result<(), DiskCacheError> {
        let path = self.path_of(key);
        fs::create_dir_all(&self.dir)
            .map_err(|source| DiskCacheError::Io { path: self.dir.clone(), source })?;
        let header = encode_header(&key.to_bytes(), payload);
        hlo_ir::atomic::write_with(&path, |f| {
            std::io::Write::write_all(f, &header)?;
            std::io::Write::write_all(f, payload)
        })
        .map_err(|source| DiskCacheError::Io { path, source })
    }

    #[cfg(test)]
    /// Removes `key`'s entry; whether there was one.
    pub fn remove(&self, key: &CacheKey) -> Result<bool, DiskCacheError> {
        let path = self.path_of(key);
        match fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(source) => Err(DiskCacheError::Io { path, source }),
        }
    }
}

/// Everything before the payload.
fn encode_header(key: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut h = Vec::with_capacity(HEADER_FIXED + key.len() + TRAILER_FIXED);
    h.extend_from_slice(&DISK_MAGIC);
    h.extend_from_slice(&DISK_FORMAT_VERSION.to_le_bytes());
    h.extend_from_slice(&(key.len() as u32).to_le_bytes());
    h.extend_from_slice(key);
    h.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    let mut sum = Fnv128::new();
    sum.write(&h);
    sum.write(payload);
    h.extend_from_slice(&sum.finish().0.to_le_bytes());
    h
}

/// The payload of an entry that must hold `key`, or why the entry cannot be trusted.
fn decode(mut bytes: Vec<u8>, key: &[u8]) -> Result<Vec<u8>, String> {
    let len = bytes.len();
    if len < HEADER_FIXED {
        return Err(format!("{len} bytes, shorter than the {HEADER_FIXED}-byte header"));
    }
    if bytes[..8] != DISK_MAGIC {
        return Err("not a cache entry (bad magic)".into());
    }
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let version = u32_at(8);
    if version != DISK_FORMAT_VERSION {
        return Err(format!("format version {version}, expected {DISK_FORMAT_VERSION}"));
    }
    let key_len = u32_at(12) as usize;
    let payload_at = HEADER_FIXED
        .checked_add(key_len)
        .and_then(|n| n.checked_add(TRAILER_FIXED))
        .filter(|&n| n <= len)
        .ok_or_else(|| {
            format!("truncated: {len} bytes cannot hold a {key_len}-byte key and the header")
        })?;
    let key_end = HEADER_FIXED + key_len;
    let payload_len = u64::from_le_bytes(bytes[key_end..key_end + 8].try_into().expect("8 bytes"));
    let actual = (len - payload_at) as u64;
    if payload_len != actual {
        let what = if actual < payload_len { "truncated" } else { "trailing bytes" };
        return Err(format!(
            "{what}: the header announces a {payload_len}-byte payload, {actual} bytes follow"
        ));
    }
    let stored = u128::from_le_bytes(bytes[key_end + 8..payload_at].try_into().expect("16 bytes"));
    let mut sum = Fnv128::new();
    sum.write(&bytes[..key_end + 8]);
    sum.write(&bytes[payload_at..]);
    if sum.finish().0 != stored {
        return Err("checksum mismatch (damaged entry)".into());
    }
    if &bytes[HEADER_FIXED..key_end] != key {
        return Err("the entry holds another key (a file copied or renamed into place?)".into());
    }
    Ok(bytes.split_off(payload_at))
}

// ---- buckets and padding ----

/// The smallest of `buckets` that is at least `n`; `None` when `n` exceeds them all.
/// `buckets` need not be sorted. Compiling for `bucket(batch, &[8, 16, 32, 64])` instead
/// of every batch size bounds the number of compiles by the number of buckets; the
/// arguments are padded up with [`pad_dim`].
pub fn bucket(n: usize, buckets: &[usize]) -> Option<usize> {
    buckets.iter().copied().filter(|&b| b >= n).min()
}

/// Why [`pad_dim`] could not pad.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PadError {
    /// `dim` is not below the tensor's rank.
    NoSuchDim {
        /// The dimension asked for.
        dim: usize,
        /// The tensor's rank.
        rank: usize,
    },
    /// The target is smaller than the current size.
    Shrink {
        /// The dimension.
        dim: usize,
        /// Its size now.
        size: u64,
        /// The smaller size asked for.
        to: u64,
    },
    /// The padded tensor cannot be built (too large).
    Tensor(TensorError),
}

impl fmt::Display for PadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PadError::NoSuchDim { dim, rank } => {
                write!(f, "dimension {dim} of a rank-{rank} tensor")
            }
            PadError::Shrink { dim, size, to } => {
                write!(f, "cannot pad dimension {dim} of size {size} down to {to}")
            }
            PadError::Tensor(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for PadError {}

impl From<TensorError> for PadError {
    fn from(e: TensorError) -> PadError {
        PadError::Tensor(e)
    }
}

/// Pads dimension `dim` of a row-major tensor up to `to` elements with zero bits (0, +0.0,
/// false; for `f8e8m0fnu`, which has no zero, its smallest value) after the existing ones,
/// and returns it with its mask: `pred[to]`, true for the original positions `0..size`
/// and false for the padding. A program compiled for the padded shape must not let padding
/// reach its results: it multiplies by (or selects on) the mask broadcast along `dim`, e.g.
/// `convert(mask)` to f32 as the weights of a masked mean over a padded batch.
pub fn pad_dim(t: &Tensor, dim: usize, to: u64) -> Result<(Tensor, Tensor), PadError> {
    let dims = t.dims();
    let Some(&size) = dims.get(dim) else {
        return Err(PadError::NoSuchDim { dim, rank: dims.len() });
    };
    if to < size {
        return Err(PadError::Shrink { dim, size, to });
    }
    let mut padded_dims = dims.to_vec();
    padded_dims[dim] = to;
    let mut out = Tensor::zeros(t.elem(), &padded_dims)?.into_bytes();
    // Both sizes fit in memory: the tensor exists and `zeros` checked the padded one.
    let outer = hlo_ir::tensor::element_count(&dims[..dim])?;
    let inner = hlo_ir::tensor::element_count(&dims[dim + 1..])? * t.elem_size();
    let src_row = size as usize * inner;
    if src_row > 0 {
        // `out` holds outer * to * inner >= outer * src_row > 0 bytes, so this fits.
        let dst_row = to as usize * inner;
        for (o, src) in t.bytes().chunks_exact(src_row).take(outer).enumerate() {
            out[o * dst_row..o * dst_row + src_row].copy_from_slice(src);
        }
    }
    let padded = Tensor::from_bytes(t.elem(), padded_dims, out)?;
    let to_len = usize::try_from(to).map_err(|_| TensorError::TooLarge { dims: vec![to] })?;
    let mask: Vec<bool> = (0..to_len).map(|i| (i as u64) < size).collect();
    Ok((padded, Tensor::from_pred(&[to], &mask)?))
}
