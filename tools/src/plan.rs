//! `hloc plan`: which parallelism, rematerialization and batch split to use for a model on
//! a TPU slice, found by simulating the candidates on the TPU model.
//!
//! **The request**: a model as the generators of `tools/models/models.py` build it (a
//! row's `model` object: `decoder-lm`, MaxText's decoder with GQA/multi-query attention
//! or SwiGLU where the block names them; `decoder-lm-moe`, DeepSeek-V2's MLA and dropless
//! experts), a chip generation, a chip count, the slices they form (joined by the
//! data-center network) and a global batch (sequences per step). `--row NAME` takes all
//! of it from a published row of `../shared/tpu-published/rows.json` and marks the
//! row's own configuration in the table.
//!
//! **The candidates** (MaxText's mesh and conventions, as the generators build them): data
//! parallelism across the slices (`dcn_data` = slices), and within a slice every split
//! into FSDP x tensor parallelism whose tensor degree divides the heads, key/value heads
//! and MLP width (the `decoder-lm-moe` generator has no tensor axis: FSDP only); each
//! remat policy (`none`, `minimal` = `checkpoint_dots_with_no_batch_dims`, `full`); and
//! each gradient accumulation `k` up to `--max-accum` that divides the per-device batch
//! (MaxText's per-device batch is the global batch over every chip, the tensor axis
//! included). Expert parallelism and pipeline stages are not generated.
//!
//! **Pruning before simulating**: a candidate whose lower bound on HBM per chip exceeds
//! the chip's capacity is not simulated. The bound counts only what the step must hold:
//! the f32 weights and both AdamW moments over the devices that shard them (and the f32
//! gradient accumulator when `k > 1`), plus the activations the remat policy saves across
//! the layer scan: each layer's input (`full`), and with `minimal` or `none` also the
//! query/key/value and MLP-input projections, in bf16 — never more than the step holds, so
//! nothing that could fit is pruned. Parameters are counted from the dimensions (the
//! embedding and the layers' matrices; norms left out, which only lowers the bound).
//!
//! **Simulation**: the remaining candidates are built by the generators (lowered for the
//! chip's TPU topology with the Pallas kernels MaxText calls, when the libtpu venv is
//! installed; else host-lowered, attention written out) in batch processes
//! (`models.py --batch`: jax starts once per process, about one process per two jobs),
//! and each program is simulated as soon as it is written, `--jobs` at a time, in this
//! process (the library calls `hloc compile --chips N --slices S --json` makes,
//! [`crate::predict`]). Generated programs are cached
//! (`target/plan`, keyed by the generators' source and the candidate), so a second plan
//! (another batch size, another chip count's subset) reuses every program it shares. With
//! accumulation, the step is `k` microbatch steps and the peak adds the accumulator: this
//! counts the optimizer update and the gradient reduce-scatter `k` times (an upper bound on
//! the step; MaxText reduces and updates once).
//!
//! **Ranking**: the configurations that fit, fastest first (the global batch is fixed, so
//! step time ranks throughput), then those simulated over capacity, with tokens/s per
//! chip, MFU (the generators' FLOP convention), HBM peak against capacity and exposed
//! communication. `--json` prints the same as JSON, `--svg` draws step time and HBM per
//! configuration.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::{Mutex, mpsc};

use serde_json::{Value, json};

use crate::error::CliError;
use crate::generators::{fnv, libtpu_python, project_dir, python_error, resolve};
use crate::predict;

#[derive(clap::Args)]
pub struct PlanArgs {
    /// Plan for a published row of `--rows`: its model, chip, chips, slices and global
    /// batch (per-device batch x chips); its own configuration is marked in the table.
    #[arg(long, conflicts_with = "model")]
    row: Option<String>,
    /// The published rows (default: ../shared/tpu-published/rows.json beside the project).
    #[arg(long)]
    rows: Option<PathBuf>,
    /// The model: a JSON file holding a row's `model` object (family `decoder-lm` or
    /// `decoder-lm-moe`, with layers, emb, heads, head_dim, mlp, vocab, seq, ...), or a
    /// whole row (its `model`, and `chip`, `chips` unless given here).
    #[arg(long)]
    model: Option<PathBuf>,
    /// The chip generation: v4, v5e or v5p.
    #[arg(long)]
    chip: Option<String>,
    /// Chips in all (every slice).
    #[arg(long)]
    chips: Option<u64>,
    /// Slices the chips form, joined by the data-center network (data parallel across
    /// them, as MaxText's `dcn_data_parallelism`).
    #[arg(long)]
    slices: Option<u64>,
    /// Sequences per step, over every chip.
    #[arg(long)]
    global_batch: Option<u64>,
    /// Only these tensor-parallel degrees (comma-separated; default: every degree that
    /// divides the slice, the heads and the MLP width).
    #[arg(long, value_delimiter = ',')]
    tensor: Vec<u64>,
    /// Remat policies to try (comma-separated: none, minimal, full).
    #[arg(long, value_delimiter = ',', default_value = "none,minimal,full")]
    remat: Vec<String>,
    /// The largest gradient accumulation tried (microbatches per step).
    #[arg(long, default_value_t = 4)]
    max_accum: u64,
    /// Candidates simulated at once (default: the machine's cores).
    #[arg(long)]
    jobs: Option<usize>,
    /// Rows of the table printed (every simulated configuration with --json).
    #[arg(long, default_value_t = 20)]
    top: usize,
    /// The plan as JSON.
    #[arg(long)]
    json: bool,
    /// Also draw step time and HBM per configuration here (SVG).
    #[arg(long)]
    svg: Option<PathBuf>,
    /// A Python with jax for the host-lowered programs (default: the XLA oracle's venv).
    #[arg(long)]
    python: Option<PathBuf>,
    /// The libtpu venv's Python, to lower each candidate for the chip's TPU topology with
    /// the Pallas kernels (default: as `hloc validate`).
    #[arg(long)]
    tpu_python: Option<PathBuf>,
    /// Lower on host devices even when the libtpu venv is there (attention written out).
    #[arg(long, conflicts_with = "tpu_python")]
    host_lowered: bool,
    /// Where generated programs are kept between runs (default: target/plan).
    #[arg(long)]
    cache: Option<PathBuf>,
}

/// What to plan for.
#[derive(Clone, Debug)]
pub struct Request {
    /// A row as the generators take it (model, metric, conventions); the planner sets its
    /// `parallelism`, `chips` and the model's `remat` per candidate.
    pub base: Value,
    pub family: String,
    pub chip: String,
    pub chips: u64,
    pub slices: u64,
    pub global_batch: u64,
    /// The published configuration, when planning for a row.
    pub published: Option<Config>,
    /// The tensor degrees allowed (empty: all).
    pub tensor: Vec<u64>,
    pub remat: Vec<String>,
    pub max_accum: u64,
}

/// One configuration of the step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Data parallelism across slices.
    pub dcn: u64,
    pub fsdp: u64,
    pub tensor: u64,
    pub remat: String,
    /// Sequences per device in one microbatch (MaxText's per_device_batch_size).
    pub micro_batch: u64,
    /// Microbatches per step (gradient accumulation).
    pub accum: u64,
}

impl Config {
    /// `fsdp 16 x tensor 4, remat minimal, batch 8/device` (and `x 2 slices`, `x 2 accum`).
    pub fn label(&self) -> String {
        let mut s = format!("fsdp {} x tensor {}", self.fsdp, self.tensor);
        if self.dcn > 1 {
            s = format!("dcn {} x {s}", self.dcn);
        }
        s += &format!(", remat {}, batch {}/device", self.remat, self.micro_batch);
        if self.accum > 1 {
            s += &format!(" x {} accum", self.accum);
        }
        s
    }
}

/// A candidate's outcome.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub config: Config,
    /// The HBM lower bound it was pruned by (or passed), bytes per chip.
    pub hbm_lower_bound: u64,
    pub state: State,
}

#[derive(Clone, Debug)]
pub enum State {
    /// Not simulated: its HBM lower bound exceeds the capacity.
    Pruned,
    /// Generation or simulation failed (the reason).
    Failed(String),
    Simulated(Sim),
}

/// A simulated candidate.
#[derive(Clone, Debug)]
pub struct Sim {
    /// The whole step (every microbatch), seconds.
    pub step_s: f64,
    pub mfu_pct: Option<f64>,
    pub tflops_per_chip: f64,
    pub hbm_peak: u64,
    pub hbm_capacity: u64,
    pub exposed_comm_pct: f64,
    /// Whether the program calls Pallas kernels (lowered for TPU).
    pub lowered_for_tpu: bool,
}

impl Sim {
    pub fn fits(&self) -> bool {
        self.hbm_peak <= self.hbm_capacity
    }
}

/// HBM per chip of each generation (the presets of `hlo_chip::config`), and whether a JAX
/// device is one chip (v4 megacore, v5e, v5p) — v2 and v3 devices are TensorCores.
fn hbm_capacity(chip: &str) -> Option<u64> {
    let cfg = hlo_chip::config::TpuConfig::preset(chip)?;
    matches!(chip, "v4" | "v5e" | "v5p").then_some(cfg.hbm_bytes)
}

fn num(v: &Value, key: &str) -> Option<u64> {
    v[key]
        .as_u64()
        .or_else(|| v[key].as_f64().filter(|f| f.fract() == 0.0 && *f >= 0.0).map(|f| f as u64))
}

/// The request from the command line: a row, or a model file and the sizes, each size
/// checked against the constraints the generators and the mesh impose.
pub fn request(a: &PlanArgs) -> Result<Request, String> {
    let (base, published) = if let Some(name) = &a.row {
        let rows_path = a
            .rows
            .clone()
            .unwrap_or_else(|| project_dir().join("../shared/tpu-published/rows.json"));
        let text = std::fs::read_to_string(&rows_path)
            .map_err(|e| format!("cannot read `{}`: {e}", rows_path.display()))?;
        let rows: Vec<Value> = serde_json::from_str(&text)
            .map_err(|e| format!("`{}` is not a JSON list of rows: {e}", rows_path.display()))?;
        let raw = rows
            .iter()
            .find(|r| r["name"] == name.as_str())
            .ok_or_else(|| format!("no row named `{name}` in `{}`", rows_path.display()))?;
        let row = resolve(&rows, raw);
        let par = &row["parallelism"];
        let published = |row: &Value| -> Option<Config> {
            let remat = remat_word(row["model"]["remat"].as_str().unwrap_or("full"))?;
            Some(Config {
                dcn: num(par, "dcn_data").unwrap_or(1),
                fsdp: num(par, "ici_fsdp").unwrap_or(1),
                tensor: num(par, "ici_tensor").unwrap_or(1),
                remat,
                micro_batch: num(par, "per_device_batch")?,
                accum: 1,
            })
        };
        let p = published(&row);
        (row, p)
    } else if let Some(path) = &a.model {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the model `{}`: {e}", path.display()))?;
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| format!("`{}` is not JSON: {e}", path.display()))?;
        let row = if v.get("model").is_some() { v } else { json!({ "model": v }) };
        (row, None)
    } else {
        return Err(
            "give --row NAME, or --model FILE.json with --chip, --chips and --global-batch".into(),
        );
    };
    let family = base["model"]["family"].as_str().unwrap_or("").to_string();
    if !matches!(family.as_str(), "decoder-lm" | "decoder-lm-moe") {
        return Err(format!(
            "model family `{family}`: hloc plan searches the decoder language models of tools/models (decoder-lm, decoder-lm-moe)"
        ));
    }
    check_model(&family, &base["model"])?;
    let chip = a
        .chip
        .clone()
        .or_else(|| base["chip"].as_str().map(str::to_string))
        .ok_or("give --chip (v4, v5e or v5p)")?;
    if hbm_capacity(&chip).is_none() {
        return Err(format!(
            "unknown chip `{chip}`: hloc plan plans v4, v5e and v5p, whose JAX devices are whole chips (v2 and v3 devices are TensorCores)"
        ));
    }
    let chips = a.chips.or_else(|| num(&base, "chips")).ok_or("give --chips")?;
    let slices = a.slices.or_else(|| num(&base["parallelism"], "slices")).unwrap_or(1);
    if chips == 0 || slices == 0 {
        return Err("--chips and --slices must be at least 1".into());
    }
    if chips % slices != 0 {
        return Err(format!("{chips} chips do not split into {slices} equal slices"));
    }
    let global_batch = match a.global_batch {
        Some(g) => g,
        None => {
            let pdb = num(&base["parallelism"], "per_device_batch").ok_or("give --global-batch")?;
            pdb * chips
        }
    };
    if global_batch == 0 || global_batch % chips != 0 {
        return Err(format!(
            "a global batch of {global_batch} does not divide over {chips} chips: MaxText's per-device batch (global batch / chips, the tensor axis included) must be a whole number"
        ));
    }
    let per_slice = chips / slices;
    for &t in &a.tensor {
        if t == 0 || !per_slice.is_multiple_of(t) {
            return Err(format!(
                "a tensor degree of {t} does not divide the {per_slice} chips of a slice (the mesh is dcn {slices} x fsdp x tensor)"
            ));
        }
    }
    let mut remat = Vec::new();
    for r in &a.remat {
        remat.push(
            remat_word(r)
                .ok_or_else(|| format!("unknown remat policy `{r}` (none, minimal, full)"))?,
        );
    }
    if a.max_accum == 0 {
        return Err("--max-accum must be at least 1".into());
    }
    Ok(Request {
        base,
        family,
        chip,
        chips,
        slices,
        global_batch,
        published,
        tensor: a.tensor.clone(),
        remat,
        max_accum: a.max_accum,
    })
}

/// The decoder's dimensions the generators read, each a whole number of at least 1, and
/// key/value heads that divide the heads: a model the generator would refuse for every
/// candidate (or build with no heads at all) is refused once, naming the key. `decoder-lm`
/// needs `head_dim` and `mlp` too; the MoE generator has defaults for them.
fn check_model(family: &str, model: &Value) -> Result<(), String> {
    let mut required = vec!["layers", "emb", "heads", "vocab", "seq"];
    if family == "decoder-lm" {
        required.extend(["head_dim", "mlp"]);
    }
    for key in ["layers", "emb", "heads", "vocab", "seq", "head_dim", "mlp", "kv_heads"] {
        let v = &model[key];
        if v.is_null() {
            if required.contains(&key) {
                return Err(format!(
                    "the model has no `{key}` ({family} needs {})",
                    required.join(", ")
                ));
            }
            continue;
        }
        if num(model, key).is_none_or(|n| n == 0) {
            return Err(format!(
                "the model's `{key}` is {v}: it must be a whole number of at least 1"
            ));
        }
    }
    if let (Some(heads), Some(kv)) = (num(model, "heads"), num(model, "kv_heads"))
        && !heads.is_multiple_of(kv)
    {
        return Err(format!(
            "the model's {kv} key/value heads do not divide its {heads} heads (grouped-query attention shares each key/value head among a whole group of query heads)"
        ));
    }
    Ok(())
}

/// A remat policy's first word, as the generators read it.
fn remat_word(text: &str) -> Option<String> {
    let word = text.split_whitespace().next().unwrap_or("full").to_lowercase();
    match word.as_str() {
        "none" | "false" | "no" => Some("none".into()),
        "minimal" | "full" => Some(word),
        _ => None,
    }
}

/// The model's dimensions the bound needs (the decoder's).
struct Dims {
    layers: u64,
    emb: u64,
    heads: u64,
    kv_heads: u64,
    head_dim: u64,
    mlp: u64,
    vocab: u64,
    seq: u64,
    swiglu: bool,
}

fn dims(model: &Value) -> Option<Dims> {
    let block = model["block"].as_str().unwrap_or("").to_lowercase();
    let heads = num(model, "heads")?;
    let kv_heads = num(model, "kv_heads").unwrap_or(
        if block.contains("multi-query") || block.contains("multiquery") { 1 } else { heads },
    );
    Some(Dims {
        layers: num(model, "layers")?,
        emb: num(model, "emb")?,
        heads,
        kv_heads,
        head_dim: num(model, "head_dim")?,
        mlp: num(model, "mlp")?,
        vocab: num(model, "vocab")?,
        seq: num(model, "seq")?,
        swiglu: block.contains("swiglu"),
    })
}

/// Every candidate configuration of the request, in a fixed order.
pub fn candidates(r: &Request) -> Vec<Config> {
    let per_slice = r.chips / r.slices;
    let pdb = r.global_batch / r.chips;
    let d = dims(&r.base["model"]);
    let tensor_ok = |t: u64| match (&d, r.family.as_str()) {
        (_, "decoder-lm-moe") => t == 1,
        // Key/value heads the tensor axis does not divide are replicated over it (GQA, as
        // multi-query's single head): only the query heads and the MLP must split.
        (Some(d), _) => d.heads % t == 0 && d.mlp % t == 0,
        (None, _) => t == 1,
    };
    let mut out = Vec::new();
    for t in (1..=per_slice).filter(|t| per_slice.is_multiple_of(*t)) {
        if !tensor_ok(t) || (!r.tensor.is_empty() && !r.tensor.contains(&t)) {
            continue;
        }
        for remat in &r.remat {
            for k in (1..=r.max_accum.min(pdb)).filter(|k| pdb.is_multiple_of(*k)) {
                out.push(Config {
                    dcn: r.slices,
                    fsdp: per_slice / t,
                    tensor: t,
                    remat: remat.clone(),
                    micro_batch: pdb / k,
                    accum: k,
                });
            }
        }
    }
    // The published configuration is always a candidate (a row may use a degree the
    // filters leave out).
    if let Some(p) = &r.published
        && !out.contains(p)
    {
        out.push(p.clone());
    }
    out
}

/// A lower bound on the HBM per chip of `c` (see the module doc): 0 when the model's
/// dimensions are not those of a dense decoder (nothing is pruned).
pub fn hbm_lower_bound(r: &Request, c: &Config) -> u64 {
    let Some(d) = dims(&r.base["model"]).filter(|_| r.family == "decoder-lm") else {
        return 0;
    };
    let mlp_mats = if d.swiglu { 3 } else { 2 };
    let per_layer = d.emb * d.heads * d.head_dim * 2
        + d.emb * d.kv_heads * d.head_dim * 2
        + d.emb * d.mlp * mlp_mats;
    let params = d.layers * per_layer + d.vocab * d.emb;
    let shards = c.fsdp * c.tensor;
    let state_bytes = if c.accum > 1 { 16 } else { 12 };
    let state = params * state_bytes / shards;
    let tokens = c.micro_batch * d.seq;
    let saved_per_token = match c.remat.as_str() {
        "full" => d.emb,
        _ => d.emb + d.heads * d.head_dim + 2 * d.kv_heads * d.head_dim + d.mlp,
    };
    state + d.layers * tokens * saved_per_token * 2
}

/// A candidate's program: the generators' row and where its files are cached.
pub struct Program {
    row: Value,
    hlo: PathBuf,
    meta: PathBuf,
}

/// Builds candidates' programs (`models.py`, cached) and simulates them ([`crate::predict`]).
pub struct Runner {
    python: PathBuf,
    tpu_python: Option<PathBuf>,
    generator: PathBuf,
    gen_src: Vec<u8>,
    cache: PathBuf,
}

impl Runner {
    /// The generators' row for `c`.
    fn row(&self, r: &Request, c: &Config) -> Value {
        let mut row = r.base.clone();
        row["name"] = json!(format!(
            "plan-{}-{}x{}x{}-{}-b{}",
            r.chip, c.dcn, c.fsdp, c.tensor, c.remat, c.micro_batch
        ));
        row["chip"] = json!(r.chip);
        row["chips"] = json!(r.chips);
        row["model"]["remat"] = json!(c.remat);
        let mut par = json!({
            "ici_fsdp": c.fsdp,
            "per_device_batch": c.micro_batch,
            "slices": c.dcn,
        });
        if c.tensor > 1 {
            par["ici_tensor"] = json!(c.tensor);
        }
        if c.dcn > 1 {
            par["dcn_data"] = json!(c.dcn);
        }
        row["parallelism"] = par;
        if let Some(o) = row.as_object_mut() {
            // What describes the published run, not the candidate.
            for key in ["published", "mfu_pct", "same_as", "stretch", "topology"] {
                o.remove(key);
            }
        }
        row
    }

    /// Where `c`'s program and metadata are cached (the generators' source and the row
    /// key them), and the row that builds them.
    fn program(&self, r: &Request, c: &Config) -> Program {
        let row = self.row(r, c);
        let row_text = serde_json::to_string(&row).unwrap_or_default();
        let key = fnv(&[self.gen_src.as_slice(), row_text.as_bytes()].concat());
        let name = row["name"].as_str().unwrap_or("plan");
        let suffix = if self.tpu_python.is_some() { "-tpu-lowered" } else { "" };
        let hlo = self.cache.join(format!("{name}-{key:016x}{suffix}.hlo"));
        let meta = self.cache.join(format!("{name}-{key:016x}{suffix}.json"));
        Program { row, hlo, meta }
    }

    /// Builds `programs` in one generator process (`models.py --batch`: jax starts once),
    /// sending each one's index in `programs` as it is written, or its error. A generator
    /// that dies fails the programs it did not report, with its last error line.
    fn generate_batch(
        &self,
        programs: &[(usize, Program)],
        tx: &mpsc::Sender<(usize, Result<(), String>)>,
    ) {
        let jobs: Vec<Value> = programs
            .iter()
            .map(|(_, p)| json!({"config": p.row, "out": p.hlo, "meta": p.meta}))
            .collect();
        let list = self.cache.join(format!(
            "batch-{}-{:016x}.json",
            std::process::id(),
            fnv(serde_json::to_string(&jobs).unwrap_or_default().as_bytes())
        ));
        let fail_all = |why: String| {
            for (i, _) in programs {
                let _ = tx.send((*i, Err(why.clone())));
            }
        };
        if let Err(e) = std::fs::write(&list, serde_json::to_string(&jobs).unwrap_or_default()) {
            return fail_all(format!("cannot write `{}`: {e}", list.display()));
        }
        let python = self.tpu_python.as_ref().unwrap_or(&self.python);
        let mut cmd = Command::new(python);
        cmd.arg(&self.generator).arg("--batch").arg(&list);
        if self.tpu_python.is_some() {
            cmd.args(["--tpu", "auto"]);
        }
        let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn();
        let mut child = match child {
            Ok(c) => c,
            Err(e) => return fail_all(format!("cannot run `{}`: {e}", python.display())),
        };
        // Standard error is drained beside standard output (libtpu is talkative), so
        // neither pipe fills while the other is read.
        let stderr = child.stderr.take();
        let err_reader = std::thread::spawn(move || {
            let mut text = Vec::new();
            if let Some(mut e) = stderr {
                let _ = std::io::Read::read_to_end(&mut e, &mut text);
            }
            text
        });
        let mut reported = vec![false; programs.len()];
        if let Some(out) = child.stdout.take() {
            for line in std::io::BufRead::lines(std::io::BufReader::new(out)).map_while(Result::ok)
            {
                let Ok(v) = serde_json::from_str::<Value>(&line) else { continue };
                let Some(j) =
                    v["index"].as_u64().map(|j| j as usize).filter(|&j| j < programs.len())
                else {
                    continue;
                };
                reported[j] = true;
                let result = match v["error"].as_str() {
                    Some(e) => {
                        let _ = std::fs::remove_file(&programs[j].1.hlo);
                        let _ = std::fs::remove_file(&programs[j].1.meta);
                        Err(format!("the model generator failed: {e}"))
                    }
                    None => Ok(()),
                };
                let _ = tx.send((programs[j].0, result));
            }
        }
        let _ = child.wait();
        let stderr = err_reader.join().unwrap_or_default();
        let _ = std::fs::remove_file(&list);
        for (j, (i, p)) in programs.iter().enumerate() {
            if !reported[j] {
                let _ = std::fs::remove_file(&p.hlo);
                let _ = std::fs::remove_file(&p.meta);
                let _ = tx.send((
                    *i,
                    Err(format!("the model generator failed: {}", python_error(&stderr))),
                ));
            }
        }
    }

    /// `hloc compile --chips N --json` on `c`'s generated program.
    fn simulate(&self, r: &Request, c: &Config, p: &Program) -> Result<Sim, String> {
        let (hlo, meta_path) = (&p.hlo, &p.meta);
        let meta: Value = std::fs::read_to_string(meta_path)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .ok_or("the generator's metadata is unreadable")?;
        let flops = meta["model_flops_per_device"].as_f64().ok_or("metadata without FLOPs")?;
        let devices = meta["devices"].as_u64().ok_or("metadata without devices")?;
        // `hloc compile FILE --chips N --slices S --model-flops F --json`, in this process
        // (the same library calls); a panic is this candidate's failure.
        let text = std::fs::read_to_string(hlo)
            .map_err(|e| format!("cannot read `{}`: {e}", hlo.display()))?;
        let first = |d: &hlo_ir::Diagnostics| {
            d.iter().next().map_or("invalid module".to_string(), |x| x.message.clone())
        };
        let rep = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let m = hlo_driver::parse(&text)
                .map_err(|d| format!("`{}`: {}", hlo.display(), first(&d)))?;
            let n = devices as usize;
            let cfg = predict::chips_config(&r.chip, n, Some(c.dcn), None, None, false)
                .map_err(|e| e.to_string())?;
            match predict::predict(&m, &text, &hlo.display().to_string(), &cfg, n, Some(flops)) {
                Ok(p) => Ok(p.json),
                Err(CliError::Located { diags, .. }) => Err(first(&diags)),
                Err(e) => Err(e.to_string()),
            }
        }))
        .map_err(|_| "the simulation panicked".to_string())?
        .map_err(|e: String| format!("simulation: {}", e.trim_start_matches("error: ")))?;
        let micro_s = rep["step_time_us"].as_f64().ok_or("report without a step time")? * 1e-6;
        let total = rep["total_cycles"].as_f64().unwrap_or(0.0);
        let exposed = rep["exposed_comm_cycles"].as_f64().unwrap_or(0.0);
        // The gradient accumulator (f32, sharded as the weights) beside the microbatch's
        // peak.
        let params = meta["params"].as_u64().unwrap_or(0);
        let accumulator = if c.accum > 1 { params * 4 / (c.fsdp * c.tensor).max(1) } else { 0 };
        Ok(Sim {
            step_s: micro_s * c.accum as f64,
            mfu_pct: rep["mfu_pct"].as_f64(),
            tflops_per_chip: flops / micro_s / 1e12,
            hbm_peak: rep["hbm_peak_bytes"].as_u64().unwrap_or(0) + accumulator,
            hbm_capacity: rep["hbm_capacity_bytes"].as_u64().unwrap_or(0),
            exposed_comm_pct: if total > 0.0 { 100.0 * exposed / total } else { 0.0 },
            lowered_for_tpu: meta["tpu_custom_calls"].as_u64().unwrap_or(0) > 0,
        })
    }
}

/// The plan: every candidate pruned or simulated, `jobs` at a time.
pub fn plan(r: &Request, runner: &Runner, jobs: usize, progress: bool) -> Vec<Outcome> {
    let capacity = hbm_capacity(&r.chip).unwrap_or(u64::MAX);
    let mut outcomes: Vec<Outcome> = candidates(r)
        .into_iter()
        .map(|config| {
            let bound = hbm_lower_bound(r, &config);
            let state = if bound > capacity { State::Pruned } else { State::Failed(String::new()) };
            Outcome { config, hbm_lower_bound: bound, state }
        })
        .collect();
    let todo: Vec<usize> =
        (0..outcomes.len()).filter(|&i| !matches!(outcomes[i].state, State::Pruned)).collect();
    let bar = if progress {
        let pb = indicatif::ProgressBar::new(todo.len() as u64);
        pb.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:30} {pos}/{len} simulated {elapsed} {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        pb
    } else {
        indicatif::ProgressBar::hidden()
    };
    // Programs already cached are simulated at once; the rest are built by generator
    // processes (about one per two jobs, each starting jax once for its share) and
    // simulated as each is written.
    let programs: Vec<(usize, Program)> =
        todo.iter().map(|&i| (i, runner.program(r, &outcomes[i].config))).collect();
    let (tx, rx) = mpsc::channel::<(usize, Result<(), String>)>();
    let mut to_build: Vec<Vec<(usize, Program)>> = Vec::new();
    let generators = jobs.div_ceil(2).max(1);
    let mut pending = 0;
    let mut paths = std::collections::HashMap::new();
    for (i, p) in programs {
        paths.insert(i, (p.hlo.clone(), p.meta.clone()));
        if p.hlo.exists() && p.meta.exists() {
            let _ = tx.send((i, Ok(())));
        } else {
            if to_build.len() < generators {
                to_build.push(Vec::new());
            }
            let k = pending % generators;
            to_build[k].push((i, p));
            pending += 1;
        }
    }
    let rx = Mutex::new(rx);
    let results = Mutex::new(Vec::new());
    let outcomes_ref = &outcomes;
    std::thread::scope(|s| {
        for share in &to_build {
            let tx = tx.clone();
            s.spawn(move || runner.generate_batch(share, &tx));
        }
        drop(tx);
        for _ in 0..jobs.max(1) {
            s.spawn(|| {
                loop {
                    let next = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
                    let Ok((i, built)) = next else { break };
                    let config = &outcomes_ref[i].config;
                    bar.set_message(config.label());
                    let state = match built.and_then(|()| {
                        let (hlo, meta) = &paths[&i];
                        let p = Program { row: Value::Null, hlo: hlo.clone(), meta: meta.clone() };
                        runner.simulate(r, config, &p)
                    }) {
                        Ok(sim) => State::Simulated(sim),
                        Err(e) => State::Failed(e),
                    };
                    results.lock().unwrap_or_else(|e| e.into_inner()).push((i, state));
                    bar.inc(1);
                }
            });
        }
    });
    bar.finish_and_clear();
    for (i, state) in results.into_inner().unwrap_or_else(|e| e.into_inner()) {
        outcomes[i].state = state;
    }
    rank(&mut outcomes);
    outcomes
}

/// Fitting configurations fastest first, then those over capacity (fastest first), then
/// failures, then the pruned ones (smallest bound first).
fn rank(o: &mut [Outcome]) {
    let key = |x: &Outcome| -> (u8, f64) {
        match &x.state {
            State::Simulated(s) if s.fits() => (0, s.step_s),
            State::Simulated(s) => (1, s.step_s),
            State::Failed(_) => (2, 0.0),
            State::Pruned => (3, x.hbm_lower_bound as f64),
        }
    };
    o.sort_by(|a, b| {
        let (ka, kb) = (key(a), key(b));
        ka.0.cmp(&kb.0).then(ka.1.total_cmp(&kb.1))
    });
}

fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

/// A finished plan: the request, every candidate's outcome in rank order, and how it ran.
pub struct Executed {
    pub request: Request,
    pub outcomes: Vec<Outcome>,
    pub wall_s: f64,
    pub jobs: usize,
    /// Which programs were simulated (lowered for TPU or on host devices).
    pub lowering: &'static str,
}

impl Executed {
    /// The plan as `--json` prints it.
    pub fn to_json(&self) -> Value {
        to_json(&self.request, &self.outcomes, self.wall_s, self.lowering)
    }

    /// Whether the plan failed: nothing simulated, or the published configuration failed.
    pub fn failed(&self) -> bool {
        let simulated = self.outcomes.iter().any(|o| matches!(o.state, State::Simulated(_)));
        let published_failed = self.outcomes.iter().any(|o| {
            Some(&o.config) == self.request.published.as_ref()
                && matches!(o.state, State::Failed(_))
        });
        !simulated || published_failed
    }
}

/// Plans as `hloc plan` does (the request checked, the candidates pruned, built and
/// simulated, the SVG written when asked), with a progress bar on standard error when
/// `progress`.
pub fn execute(a: &PlanArgs, progress: bool) -> Result<Executed, CliError> {
    let r = request(a)?;
    let python =
        a.python.clone().or_else(hlo_io::oracle::python).ok_or(
            "no Python with jax: run `bash ../shared/xla-oracle/setup.sh` or give --python",
        )?;
    let tpu_python = match (&a.tpu_python, a.host_lowered) {
        (_, true) => None,
        (Some(p), _) if !p.exists() => {
            return Err(format!("--tpu-python `{}` does not exist", p.display()).into());
        }
        (Some(p), _) => Some(p.clone()),
        (None, _) => libtpu_python(),
    };
    let generator = project_dir().join("tools/models/models.py");
    let gen_src = std::fs::read(&generator)
        .map_err(|e| format!("cannot read the model generators `{}`: {e}", generator.display()))?;
    let cache = a.cache.clone().unwrap_or_else(|| project_dir().join("target/plan"));
    std::fs::create_dir_all(&cache).map_err(|e| CliError::io("create", &cache, e))?;
    let lowering = if tpu_python.is_some() {
        "lowered for the TPU topology with the Pallas kernels"
    } else {
        "host-lowered, attention written out (install the libtpu venv, tools/models/setup_libtpu.sh, for the Pallas kernels)"
    };
    let runner = Runner { python, tpu_python, generator, gen_src, cache };
    let jobs = a
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
    let t = std::time::Instant::now();
    let outcomes = plan(&r, &runner, jobs, progress);
    let wall_s = t.elapsed().as_secs_f64();
    if let Some(svg) = &a.svg {
        draw(svg, &r, &outcomes)?;
    }
    Ok(Executed { request: r, outcomes, wall_s, jobs, lowering })
}

/// `hloc plan ARGS --json` as a library call (the Python package's `hloc.plan`): the
/// arguments parsed as the command line parses them, the plan's JSON object returned
/// (`--json`, `--top` make no difference), the SVG written when asked.
pub fn plan_json(args: &[String]) -> Result<Value, CliError> {
    #[derive(clap::Parser)]
    #[command(name = "hloc plan", no_binary_name = true)]
    struct Cli {
        #[command(flatten)]
        args: PlanArgs,
    }
    let cli = <Cli as clap::Parser>::try_parse_from(args).map_err(|e| {
        CliError::Message(e.render().to_string().trim().trim_start_matches("error: ").to_string())
    })?;
    Ok(execute(&cli.args, false)?.to_json())
}

/// `hloc plan`: the table (or `--json`); exit status 1 when nothing was simulated or the
/// published configuration failed.
pub fn run(a: &PlanArgs) -> Result<ExitCode, CliError> {
    let progress = std::io::stderr().is_terminal() && !a.json;
    let x = execute(a, progress)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&x.to_json()).unwrap_or_default());
    } else {
        let count = |f: fn(&State) -> bool| x.outcomes.iter().filter(|o| f(&o.state)).count();
        print_table(&x.request, &x.outcomes, a.top);
        println!(
            "{} candidates: {} simulated, {} pruned (HBM lower bound over the chip's {:.1} GiB), {} failed; {:.1} s with {} jobs; programs {}",
            x.outcomes.len(),
            count(|s| matches!(s, State::Simulated(_))),
            count(|s| matches!(s, State::Pruned)),
            gib(hbm_capacity(&x.request.chip).unwrap_or(0)),
            count(|s| matches!(s, State::Failed(_))),
            x.wall_s,
            x.jobs,
            x.lowering,
        );
    }
    Ok(if x.failed() { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// Tokens per second per chip of a step.
fn tokens_per_chip(r: &Request, step_s: f64) -> f64 {
    let seq = num(&r.base["model"], "seq").unwrap_or(0) as f64;
    r.global_batch as f64 * seq / step_s / r.chips as f64
}

fn print_table(r: &Request, outcomes: &[Outcome], top: usize) {
    let model = r.base["name"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| r.base["model"]["family"].as_str().unwrap_or("model").to_string());
    println!(
        "plan for {model} on {} {} chips{} at a global batch of {} sequences",
        r.chips,
        r.chip,
        if r.slices > 1 { format!(" in {} slices", r.slices) } else { String::new() },
        r.global_batch
    );
    println!(
        "{:>4}  {:<58} {:>10} {:>12} {:>7} {:>8} {:>20} {:>8}",
        "rank",
        "configuration",
        "step ms",
        "tokens/s/chip",
        "MFU %",
        "TFLOP/s",
        "HBM peak / capacity",
        "exp.comm"
    );
    let mut shown = 0;
    for (i, o) in outcomes.iter().enumerate() {
        let mark = if Some(&o.config) == r.published.as_ref() { " *" } else { "" };
        let line = match &o.state {
            State::Simulated(s) => format!(
                "{:>4}  {:<58} {:>10.1} {:>12.0} {:>7} {:>8.1} {:>9.1} / {:>4.1} GiB {:>7.1}%{}{mark}",
                i + 1,
                o.config.label(),
                s.step_s * 1e3,
                tokens_per_chip(r, s.step_s),
                s.mfu_pct.map_or("-".to_string(), |m| format!("{m:.1}")),
                s.tflops_per_chip,
                gib(s.hbm_peak),
                gib(s.hbm_capacity),
                s.exposed_comm_pct,
                if s.fits() { "" } else { "  does not fit" },
            ),
            State::Failed(e) => format!("{:>4}  {:<58} failed: {e}{mark}", "-", o.config.label()),
            State::Pruned => continue,
        };
        if shown < top || !mark.is_empty() {
            println!("{line}");
            shown += 1;
        }
    }
    if r.published.is_some() {
        println!("* the published configuration");
    }
}

fn to_json(r: &Request, outcomes: &[Outcome], wall: f64, lowering: &str) -> Value {
    let rows: Vec<Value> = outcomes
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let c = &o.config;
            let mut v = json!({
                "rank": i + 1,
                "configuration": c.label(),
                "dcn": c.dcn, "fsdp": c.fsdp, "tensor": c.tensor, "remat": c.remat,
                "micro_batch": c.micro_batch, "accum": c.accum,
                "published": Some(c) == r.published.as_ref(),
                "hbm_lower_bound_bytes": o.hbm_lower_bound,
            });
            match &o.state {
                State::Simulated(s) => {
                    v["state"] = json!(if s.fits() { "fits" } else { "does not fit" });
                    v["step_s"] = json!(s.step_s);
                    v["tokens_per_s_per_chip"] = json!(tokens_per_chip(r, s.step_s));
                    v["mfu_pct"] = json!(s.mfu_pct);
                    v["tflops_per_chip"] = json!(s.tflops_per_chip);
                    v["hbm_peak_bytes"] = json!(s.hbm_peak);
                    v["hbm_capacity_bytes"] = json!(s.hbm_capacity);
                    v["hbm_fits"] = json!(s.fits());
                    v["exposed_comm_pct"] = json!(s.exposed_comm_pct);
                    v["lowered_for_tpu"] = json!(s.lowered_for_tpu);
                }
                State::Failed(e) => {
                    v["state"] = json!("failed");
                    v["error"] = json!(e);
                }
                State::Pruned => v["state"] = json!("pruned"),
            }
            v
        })
        .collect();
    let count = |s: &str| rows.iter().filter(|v| v["state"] == s).count();
    json!({
        "model": r.base["model"],
        "chip": r.chip,
        "chips": r.chips,
        "slices": r.slices,
        "global_batch": r.global_batch,
        "candidates": rows.len(),
        "simulated": count("fits") + count("does not fit"),
        "fit": count("fits"),
        "pruned": count("pruned"),
        "failed": count("failed"),
        "wall_s": wall,
        "lowering": lowering,
        "configurations": rows,
    })
}

/// Step time and HBM peak per simulated configuration, in rank order (the published
/// configuration in red, those over capacity in grey), HBM against the capacity line.
fn draw(path: &Path, r: &Request, outcomes: &[Outcome]) -> Result<(), String> {
    use plotters::prelude::*;
    let sims: Vec<(usize, &Outcome, &Sim)> = outcomes
        .iter()
        .enumerate()
        .filter_map(|(i, o)| match &o.state {
            State::Simulated(s) => Some((i + 1, o, s)),
            _ => None,
        })
        .collect();
    let err = |e: &dyn std::fmt::Display| format!("drawing `{}`: {e}", path.display());
    // Written whole to a temporary file, then renamed: never a half-written chart.
    let tmp = path.with_extension("svg.tmp");
    {
        let root = SVGBackend::new(&tmp, (960, 640)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let (top, bottom) = root.split_vertically(320);
        let n = sims.len().max(1) as f64;
        let color = |o: &Outcome, s: &Sim| {
            if Some(&o.config) == r.published.as_ref() {
                RED
            } else if s.fits() {
                BLUE
            } else {
                RGBColor(170, 170, 170)
            }
        };
        let max_step = sims.iter().map(|x| x.2.step_s).fold(0.0, f64::max).max(1e-9);
        let mut chart = ChartBuilder::on(&top)
            .caption(
                format!(
                    "{} {} chips, global batch {}: step time by rank (red: published)",
                    r.chips, r.chip, r.global_batch
                ),
                ("sans-serif", 16),
            )
            .margin(8)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..n + 1.0, 0.0..max_step * 1.1)
            .map_err(|e| err(&e))?;
        chart.configure_mesh().x_desc("rank").y_desc("step (s)").draw().map_err(|e| err(&e))?;
        chart
            .draw_series(sims.iter().enumerate().map(|(j, (_, o, s))| {
                let x = j as f64 + 1.0;
                Rectangle::new([(x - 0.35, 0.0), (x + 0.35, s.step_s)], color(o, s).filled())
            }))
            .map_err(|e| err(&e))?;
        let cap = gib(hbm_capacity(&r.chip).unwrap_or(0));
        let max_hbm = sims.iter().map(|x| gib(x.2.hbm_peak)).fold(cap, f64::max);
        let mut chart = ChartBuilder::on(&bottom)
            .caption("HBM peak per chip (line: capacity)", ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..n + 1.0, 0.0..max_hbm * 1.1)
            .map_err(|e| err(&e))?;
        chart.configure_mesh().x_desc("rank").y_desc("GiB").draw().map_err(|e| err(&e))?;
        chart
            .draw_series(sims.iter().enumerate().map(|(j, (_, o, s))| {
                let x = j as f64 + 1.0;
                Rectangle::new([(x - 0.35, 0.0), (x + 0.35, gib(s.hbm_peak))], color(o, s).filled())
            }))
            .map_err(|e| err(&e))?;
        chart
            .draw_series(LineSeries::new([(0.0, cap), (n + 1.0, cap)], BLACK.stroke_width(2)))
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    std::fs::rename(&tmp, path).map_err(|e| err(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 22B MaxText row's request (64 v4 chips, global batch 1024).
    fn request_22b(remat: &[&str], max_accum: u64) -> Request {
        let model = json!({"family": "decoder-lm", "layers": 48, "emb": 6144, "heads": 24,
                           "head_dim": 256, "mlp": 24576, "vocab": 32768, "seq": 2048,
                           "remat": "full"});
        Request {
            base: json!({"model": model}),
            family: "decoder-lm".into(),
            chip: "v4".into(),
            chips: 64,
            slices: 1,
            global_batch: 1024,
            published: None,
            tensor: vec![],
            remat: remat.iter().map(|s| s.to_string()).collect(),
            max_accum,
        }
    }

    #[test]
    fn candidates_divide_the_slice_the_heads_and_the_batch() {
        let r = request_22b(&["full", "minimal"], 4);
        let c = candidates(&r);
        // Tensor degrees dividing 64 chips, 24 heads and 24576: 1, 2, 4, 8; accumulation
        // 1, 2, 4 of a per-device batch of 16; two policies.
        assert_eq!(c.len(), 4 * 3 * 2);
        for x in &c {
            assert_eq!(x.fsdp * x.tensor * x.dcn, 64, "{x:?}");
            assert_eq!(24 % x.tensor, 0, "{x:?}");
            assert_eq!(x.micro_batch * x.accum, 16, "{x:?}");
        }
        let mut r = request_22b(&["full"], 1);
        r.tensor = vec![2];
        let c = candidates(&r);
        assert_eq!(c.len(), 1);
        assert_eq!((c[0].fsdp, c[0].tensor, c[0].accum), (32, 2, 1));
        // The published configuration is always a candidate.
        r.published = Some(Config { tensor: 1, fsdp: 64, ..c[0].clone() });
        assert_eq!(candidates(&r).len(), 2);
        // Over slices, the DCN axis is data parallel and the rest splits one slice.
        let mut r = request_22b(&["full"], 1);
        r.chips = 128;
        r.slices = 2;
        r.global_batch = 2048;
        assert!(candidates(&r).iter().all(|x| x.dcn == 2 && x.fsdp * x.tensor == 64));
    }

    #[test]
    fn the_bound_grows_with_what_the_step_keeps() {
        let r = request_22b(&["full", "minimal", "none"], 2);
        let c = candidates(&r);
        let find = |t: u64, remat: &str, k: u64| {
            c.iter().find(|x| x.tensor == t && x.remat == remat && x.accum == k).unwrap()
        };
        let b = |x: &Config| hbm_lower_bound(&r, x);
        let full = b(find(1, "full", 1));
        // Saving the projections costs more than saving layer inputs; `none` keeps at
        // least what `minimal` does; an accumulator adds the f32 gradients; halving the
        // microbatch halves the activations.
        assert!(b(find(1, "minimal", 1)) > full);
        assert_eq!(b(find(1, "none", 1)), b(find(1, "minimal", 1)));
        assert!(b(find(1, "full", 2)) < full);
        let state = |x: &Config| hbm_lower_bound(&r, &Config { micro_batch: 0, ..x.clone() });
        let (s1, s2) = (state(find(1, "full", 1)), state(find(1, "full", 2)));
        assert!(s2 > s1 && (s2 * 3).abs_diff(s1 * 4) < 64, "{s1} {s2}");
        let acts = |x: &Config| b(x) - state(x);
        assert_eq!(acts(find(1, "full", 1)), 2 * acts(find(1, "full", 2)));
        // The published 22B configuration (full remat, fsdp 64, batch 16) is not pruned on
        // a 32 GiB v4 chip; the same batch keeping every projection is.
        let cap = hbm_capacity("v4").unwrap();
        assert!(full < cap, "{full}");
        assert!(b(find(1, "minimal", 1)) > cap);
        // A model the bound does not know is never pruned.
        let mut moe = r.clone();
        moe.family = "decoder-lm-moe".into();
        assert_eq!(hbm_lower_bound(&moe, find(1, "none", 1)), 0);
    }

    #[test]
    fn remat_words_are_read_as_the_generators_read_them() {
        assert_eq!(
            remat_word("minimal (checkpoint_dots_with_no_batch_dims)").as_deref(),
            Some("minimal")
        );
        assert_eq!(remat_word("False").as_deref(), Some("none"));
        assert_eq!(remat_word("full").as_deref(), Some("full"));
        assert_eq!(remat_word("offload"), None);
    }
}
