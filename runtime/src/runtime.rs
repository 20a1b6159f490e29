//! [`Runtime`]: compiles modules on demand for the argument shapes they are called with,
//! through the shape-keyed [`CompileCache`] and, optionally, a persistent [`DiskCache`]
//! directory holding each key's optimized module (a warm process skips checking and
//! optimization and only generates code).

use std::path::PathBuf;
use std::time::Instant;

use hlo_check::Checked;
use hlo_ir::{Module, Shape, Tensor};

use crate::cache::{
    CacheKey, CacheStats, CompileCache, DiskCache, Fingerprint, Outcome, module_fingerprint,
};
use crate::error::RuntimeError;
use crate::program::{CompileOptions, Program};

/// What the persistent cache did for one compile.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DiskEvent {
    /// The optimized module came from the cache directory.
    Loaded,
    /// Not there: compiled and stored.
    Stored,
    /// A corrupt or truncated entry: reported, recompiled and overwritten.
    Replaced(String),
    /// Storing failed (the program still runs).
    StoreFailed(String),
}

/// One compile (or cache hit) as the runtime reports it.
#[derive(Clone)]
#[non_exhaustive]
pub struct Compiled {
    /// The program (a cheap handle: clone it freely).
    pub program: Program,
    /// Hit, or why it missed.
    pub outcome: Outcome,
    /// What the persistent cache did, when there is one.
    pub disk: Option<DiskEvent>,
}

/// A module as the runtime receives it: as built (checked on a miss) or already checked.
#[derive(Clone, Copy)]
enum Source<'a> {
    Module(&'a Module),
    Checked(&'a Checked<Module>),
}

/// Compiles modules on demand for the argument shapes they are called with, keeping every
/// program in a shape-keyed cache (and, with [`Runtime::with_cache_dir`], the optimized
/// modules in a directory across processes). Share it between threads by reference.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let module = hlo_driver::parse("HloModule m\nENTRY e {\n  p = f32[3] parameter(0)\n  ROOT n = f32[3] negate(p)\n}\n")?;
/// let rt = hlo_runtime::Runtime::new();
/// let x = hlo_ir::Tensor::from_f32(&[3], &[1.0, -2.0, 3.0])?;
/// let first = rt.compile_checked("neg.hlo", &module, &[x.shape()])?;
/// assert!(first.outcome.miss().is_some()); // compiled, with the reason
/// let again = rt.compile_checked("neg.hlo", &module, &[x.shape()])?;
/// assert!(again.outcome.is_hit());
/// assert_eq!(again.program.run(&[x])?[0].to_f64_vec()?, vec![-1.0, 2.0, -3.0]);
/// # Ok(())
/// # }
/// ```
pub struct Runtime {
    opts: CompileOptions,
    cache: CompileCache<Program>,
    disk: Option<DiskCache>,
}

impl Default for Runtime {
    fn default() -> Runtime {
        Runtime::new()
    }
}

/// What a stored optimized module depends on besides the module: the runtime's version,
/// whether it optimizes, and the host pipeline's passes in order (a stored module from a
/// pipeline without `tree-reduction` has other sums, so it is another entry).
fn options_fingerprint(o: &CompileOptions) -> Fingerprint {
    static PASSES: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let passes = PASSES.get_or_init(|| {
        format!("{} + {}", hlo_driver::default_order().1, hlo_driver::host_only_passes().join(","))
    });
    Fingerprint::of(
        format!(
            "hlo-runtime {} optimize={} passes={passes}",
            env!("CARGO_PKG_VERSION"),
            o.optimize
        )
        .as_bytes(),
    )
}

impl Runtime {
    /// A runtime with default options and no cache directory.
    pub fn new() -> Runtime {
        Runtime { opts: CompileOptions::default(), cache: CompileCache::new(), disk: None }
    }

    /// Also keeps optimized modules in `dir` across processes.
    pub fn with_cache_dir(mut self, dir: impl Into<PathBuf>) -> Runtime {
        self.disk = Some(DiskCache::new(dir));
        self
    }

    /// Runs its programs' parallel work on a pool of `threads` threads (0 is taken as 1)
    /// instead of the default pool ([`crate::default_threads`]); see
    /// [`CompileOptions::threads`]. Call it after [`Runtime::with_options`], which replaces
    /// every option.
    pub fn with_threads(mut self, threads: usize) -> Runtime {
        self.opts = self.opts.with_threads(threads);
        self
    }

    /// Compiles with `opts` (part of every cache key).
    pub fn with_options(mut self, opts: CompileOptions) -> Runtime {
        self.opts = opts;
        self
    }

    /// The program for `m` called with arguments of shapes `args` (compiled on a miss).
    /// `name` identifies the program in miss explanations (e.g. its file name).
    pub fn compile(
        &self,
        name: &str,
        m: &Module,
        args: &[Shape],
    ) -> Result<Compiled, RuntimeError> {
        self.compile_fingerprinted(name, module_fingerprint(m), Source::Module(m), args)
    }

    /// [`Runtime::compile`] for a module that passed the checks: a miss optimizes and
    /// generates code without checking again.
    pub fn compile_checked(
        &self,
        name: &str,
        m: &Checked<Module>,
        args: &[Shape],
    ) -> Result<Compiled, RuntimeError> {
        self.compile_fingerprinted(name, module_fingerprint(m), Source::Checked(m), args)
    }

    /// A handle on one module whose fingerprint is computed once: what a training loop
    /// keeps to look its program up by shape every step.
    pub fn entry<'a>(&'a self, name: &'a str, m: &'a Module) -> Entry<'a> {
        Entry { rt: self, name, m: Source::Module(m), fingerprint: module_fingerprint(m) }
    }

    /// [`Runtime::entry`] for a checked module.
    pub fn entry_checked<'a>(&'a self, name: &'a str, m: &'a Checked<Module>) -> Entry<'a> {
        Entry { rt: self, name, m: Source::Checked(m), fingerprint: module_fingerprint(m) }
    }

    fn compile_fingerprinted(
        &self,
        name: &str,
        fp: Fingerprint,
        m: Source<'_>,
        args: &[Shape],
    ) -> Result<Compiled, RuntimeError> {
        let key = CacheKey::new(fp, args.to_vec(), options_fingerprint(&self.opts));
        let mut disk_event = None;
        let (program, outcome) = self.cache.get_or_compile_named(name, &key, || {
            // The source module's fingerprint, however the program was made (from the
            // source, a specialization of it, or an optimized module from the directory):
            // a checkpoint of its state restores into the same module in any process.
            self.compile_miss(m, args, &key, &mut disk_event).map(|mut p| {
                p.fingerprint = fp;
                p.with_threads(self.opts.threads)
            })
        })?;
        Ok(Compiled { program: (*program).clone(), outcome, disk: disk_event })
    }

    fn compile_miss(
        &self,
        m: Source<'_>,
        args: &[Shape],
        key: &CacheKey,
        event: &mut Option<DiskEvent>,
    ) -> Result<Program, RuntimeError> {
        let Some(disk) = &self.disk else {
            return self.compile_source(m, args, self.opts.keep_optimized);
        };
        let t = Instant::now();
        let mut replaced = None;
        match disk.load(key) {
            Ok(Some(bytes)) => {
                // An optimized module this runtime stored: parsed and structurally
                // verified, not checked again (a warm process skips the checks).
                let loaded = String::from_utf8(bytes).ok().and_then(|text| {
                    let (m, diags) = hlo_ir::text::parse(&text);
                    let m = m.filter(|_| !diags.has_errors())?;
                    (!hlo_ir::verify::verify_source(&m, &text).has_errors()).then_some(m)
                });
                match loaded {
                    Some(opt) => {
                        let mut p = Program::from_optimized(&opt)?;
                        p.compile_time = t.elapsed();
                        *event = Some(DiskEvent::Loaded);
                        return Ok(p);
                    }
                    None => {
                        replaced = Some(format!(
                            "{}: the entry holds no valid module",
                            disk.path_of(key).display()
                        ))
                    }
                }
            }
            Ok(None) => {}
            Err(e) if e.is_corrupt() => replaced = Some(e.to_string()),
            Err(e) => replaced = Some(e.to_string()),
        }
        let mut p = self.compile_source(m, args, true)?;
        let text = hlo_ir::text::print(p.optimized().expect("kept for the cache directory"));
        if !self.opts.keep_optimized {
            p.forget_optimized();
        }
        *event = Some(match disk.store(key, text.as_bytes()) {
            Ok(()) => match replaced {
                Some(why) => DiskEvent::Replaced(why),
                None => DiskEvent::Stored,
            },
            Err(e) => DiskEvent::StoreFailed(e.to_string()),
        });
        Ok(p)
    }

    /// Compiles `m` for `args` (keeping the optimized module when `keep`): checked modules
    /// go straight to the optimizer; others are checked first, a shape-polymorphic one
    /// specialized to `args` ([`hlo_driver::specialize`]).
    fn compile_source(
        &self,
        m: Source<'_>,
        args: &[Shape],
        keep: bool,
    ) -> Result<Program, RuntimeError> {
        let opts = self.opts.clone().with_keep_optimized(keep);
        let m = match m {
            Source::Checked(c) => return Program::compile(c, &opts),
            Source::Module(m) => m,
        };
        let t = Instant::now();
        let checked = if hlo_driver::is_polymorphic(m) {
            hlo_driver::specialize(m, args)
        } else {
            hlo_driver::check(m.clone(), None)
        }
        .map_err(RuntimeError::compile)?;
        let mut p = Program::compile(&checked, &opts)?;
        p.compile_time = t.elapsed();
        Ok(p)
    }

    /// Compiles (or finds) the program for these arguments and runs it.
    pub fn run(
        &self,
        name: &str,
        m: &Module,
        args: &[Tensor],
    ) -> Result<Vec<Tensor>, RuntimeError> {
        let shapes: Vec<Shape> = args.iter().map(Tensor::shape).collect();
        self.compile(name, m, &shapes)?.program.run(args)
    }

    /// The in-memory cache's counters.
    pub fn stats(&self) -> CacheStats {
        self.cache.stats()
    }
}

/// See [`Runtime::entry`].
#[derive(Clone, Copy)]
pub struct Entry<'a> {
    rt: &'a Runtime,
    name: &'a str,
    m: Source<'a>,
    fingerprint: Fingerprint,
}

impl Entry<'_> {
    /// The fingerprint of the entry's module.
    pub fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }
    /// The program for arguments of these shapes (compiled on a miss).
    pub fn program(&self, args: &[Shape]) -> Result<Compiled, RuntimeError> {
        self.rt.compile_fingerprinted(self.name, self.fingerprint, self.m, args)
    }
}
