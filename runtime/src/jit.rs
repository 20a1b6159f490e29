//! The only owner of Cranelift's `JITModule`: host ISA setup, declaring, defining and
//! finalizing kernels, and freeing their code.
//!
//! Every kernel has one ABI, [`KernelFn`]: a pointer to an array of buffer pointers
//! (operands first, then results) and a range `lo..hi` of the outermost loop to run (loop
//! kernels split their outermost dimension this way across threads; other kernels ignore
//! it). One [`JitCode`] per executable holds all of its kernels'
//! machine code and frees it when dropped.

use cranelift_codegen::Context;
use cranelift_codegen::ir::{AbiParam, Signature, UserFuncName};
use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{FuncId, Linkage, Module as _};

/// A compiled kernel: `args` points at the kernel's buffer pointers, operands then results.
pub type KernelFn = unsafe extern "C" fn(args: *const *mut u8, lo: i64, hi: i64);

#[derive(Debug)]
pub struct JitError(pub String);

impl std::fmt::Display for JitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for JitError {}

fn err(what: &str, e: impl std::fmt::Display) -> JitError {
    JitError(format!("{what}: {e}"))
}

/// Cranelift's AVX-512 flags: the ones `cranelift_native` turns on from CPUID that a cap
/// below AVX-512 turns off ([`crate::cpu`]).
pub const AVX512_FLAGS: [&str; 6] = [
    "has_avx512f",
    "has_avx512vl",
    "has_avx512dq",
    "has_avx512bitalg",
    "has_avx512vbmi",
    "has_avx512vnni",
];

/// The host ISA with the flags every kernel is compiled with: what `cranelift_native`
/// detects, without AVX-512 when the instruction-set cap is below it. An invalid
/// `HLOC_ISA` is an error here, so every compile reports it.
pub fn host_isa() -> Result<OwnedTargetIsa, JitError> {
    hlo_kernels::cpu::cap().map_err(|e| err("instruction-set cap", e))?;
    let mut flags = settings::builder();
    flags.set("opt_level", "speed").map_err(|e| err("cranelift flag", e))?;
    flags.set("is_pic", "false").map_err(|e| err("cranelift flag", e))?;
    flags.set("use_colocated_libcalls", "false").map_err(|e| err("cranelift flag", e))?;
    let mut isa = cranelift_native::builder().map_err(|m| err("host ISA", m))?;
    if cfg!(target_arch = "x86_64") && !hlo_kernels::cpu::allows(hlo_kernels::cpu::Level::Avx512) {
        for flag in AVX512_FLAGS {
            isa.set(flag, "false").map_err(|e| err("cranelift flag", e))?;
        }
    }
    isa.finish(settings::Flags::new(flags)).map_err(|e| err("host ISA", e))
}

/// Whether the ISA [`host_isa`] builds has the boolean flag `name` on.
pub fn isa_flag(isa: &OwnedTargetIsa, name: &str) -> bool {
    isa.isa_flags().iter().any(|v| v.name == name && v.as_bool() == Some(true))
}

/// Compiles kernels into one code region; [`JitModule::finish`] turns it into [`JitCode`].
pub struct JitModule {
    module: JITModule,
    ctx: Context,
    fctx: FunctionBuilderContext,
    pending: Vec<FuncId>,
    /// Machine-code bytes defined so far (for statistics).
    pub code_bytes: usize,
}

impl JitModule {
    pub fn new() -> Result<JitModule, JitError> {
        let isa = host_isa()?;
        let mut jb = JITBuilder::with_isa(isa, cranelift_module::default_libcall_names());
        crate::host::register(&mut jb);
        let module = JITModule::new(jb);
        let ctx = module.make_context();
        Ok(JitModule {
            module,
            ctx,
            fctx: FunctionBuilderContext::new(),
            pending: Vec::new(),
            code_bytes: 0,
        })
    }

    pub fn pointer_type(&self) -> cranelift_codegen::ir::Type {
        self.module.target_config().pointer_type()
    }

    fn kernel_signature(&self) -> Signature {
        let mut sig = self.module.make_signature();
        sig.params.push(AbiParam::new(self.pointer_type()));
        sig.params.push(AbiParam::new(cranelift_codegen::ir::types::I64));
        sig.params.push(AbiParam::new(cranelift_codegen::ir::types::I64));
        sig
    }

    /// Defines one kernel whose body `build` emits (it receives the builder positioned in
    /// the entry block and the `args` pointer value; it must end every block it creates
    /// with a terminator, including a `return`). Returns the kernel's index in the module.
    pub fn define(
        &mut self,
        name: &str,
        build: impl FnOnce(
            &mut FunctionBuilder,
            &mut JITModule,
            cranelift_codegen::ir::Value,
            [cranelift_codegen::ir::Value; 2],
        ) -> Result<(), JitError>,
    ) -> Result<usize, JitError> {
        let sig = self.kernel_signature();
        let id = self
            .module
            .declare_function(name, Linkage::Local, &sig)
            .map_err(|e| err("declare kernel", e))?;
        self.ctx.func.signature = sig;
        self.ctx.func.name = UserFuncName::user(0, id.as_u32());
        let cfg = self.module.target_config();
        {
            let mut b = FunctionBuilder::new(&mut self.ctx.func, &mut self.fctx);
            let entry = b.create_block();
            b.append_block_params_for_function_params(entry);
            b.switch_to_block(entry);
            let params = b.block_params(entry).to_vec();
            if let Err(e) = build(&mut b, &mut self.module, params[0], [params[1], params[2]]) {
                self.module.clear_context(&mut self.ctx);
                self.fctx = FunctionBuilderContext::new();
                return Err(e);
            }
            b.seal_all_blocks();
            b.finalize(cfg);
        }
        if cfg!(debug_assertions)
            && let Err(e) = cranelift_codegen::verify_function(&self.ctx.func, self.module.isa())
        {
            let text = self.ctx.func.display().to_string();
            self.module.clear_context(&mut self.ctx);
            return Err(JitError(format!("kernel `{name}` fails the CLIF verifier: {e}\n{text}")));
        }
        // `HLOC_DUMP_KERNEL=part`: the CLIF, the optimized CLIF and the machine code of
        // every kernel whose name contains `part`, on standard error (for reading what a
        // change to the emitters does to the code); read once per process.
        static DUMP: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
        let part =
            DUMP.get_or_init(|| std::env::var("HLOC_DUMP_KERNEL").ok().filter(|d| !d.is_empty()));
        let dump = part.as_deref().is_some_and(|d| name.contains(d));
        self.ctx.set_disasm(dump);
        if dump {
            eprintln!("kernel `{name}`, as emitted:\n{}", self.ctx.func.display());
        }
        let res = self.module.define_function(id, &mut self.ctx);
        if let (Ok(()), Some(c)) = (&res, self.ctx.compiled_code()) {
            self.code_bytes += c.code_buffer().len();
            if dump {
                eprintln!("kernel `{name}`, optimized:\n{}", self.ctx.func.display());
                eprintln!("kernel `{name}`, machine code:\n{}", c.vcode.as_deref().unwrap_or("-"));
            }
        }
        self.module.clear_context(&mut self.ctx);
        res.map_err(|e| err(&format!("compile kernel `{name}`"), format!("{e:?}")))?;
        self.pending.push(id);
        Ok(self.pending.len() - 1)
    }

    /// Makes every defined kernel executable.
    pub fn finish(mut self) -> Result<JitCode, JitError> {
        self.module.finalize_definitions().map_err(|e| err("finalize kernels", e))?;
        let fns = self
            .pending
            .iter()
            .map(|&id| {
                let p = self.module.get_finalized_function(id);
                // SAFETY: every kernel was declared with the signature of `KernelFn`.
                unsafe { std::mem::transmute::<*const u8, KernelFn>(p) }
            })
            .collect();
        Ok(JitCode { module: Some(self.module), fns, code_bytes: self.code_bytes })
    }
}

/// Finalized kernels; the code lives as long as this value.
pub struct JitCode {
    module: Option<JITModule>,
    pub fns: Vec<KernelFn>,
    pub code_bytes: usize,
}

// SAFETY: after `finalize_definitions` the module is only kept to free its memory in `Drop`;
// no method that mutates it is reachable through a shared reference, and the kernels are
// plain functions over caller-provided buffers.
unsafe impl Sync for JitCode {}
unsafe impl Send for JitCode {}

impl Drop for JitCode {
    fn drop(&mut self) {
        if let Some(m) = self.module.take() {
            // SAFETY: the function pointers in `fns` are dropped with `self`; executables
            // never hand them out beyond their own lifetime.
            unsafe { m.free_memory() };
        }
    }
}
