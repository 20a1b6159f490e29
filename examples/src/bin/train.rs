//! Trains the bundled MLP for a few SGD steps by running its HLO training step on the
//! reference interpreter, feeding the updated parameters back in: how a training binary
//! embeds the toolchain. `cargo run -p hlo-examples --bin train -- [STEPS]`.

use anyhow::{Context, Result, bail};
use hlo_compiler::{interp, passes};
use hlo_ir::io::npz;

fn main() -> Result<()> {
    let steps: usize = std::env::args().nth(1).map(|s| s.parse()).transpose().context("STEPS must be a number")?.unwrap_or(20);
    let src = hlo_examples::MLP_TRAIN_HLO;
    let m = hlo_ir::parse_and_verify(src).map_err(|d| anyhow::anyhow!(d.render(src, "mlp_train.hlo", false)))?;
    let diags = passes::check(&m, Some(src));
    if diags.has_errors() {
        bail!(diags.render(src, "mlp_train.hlo", false));
    }
    let inputs_path = concat!(env!("CARGO_MANIFEST_DIR"), "/models/mlp_train.inputs.npz");
    // p0..p3 are the weights, p4 the batch, p5 the labels; outputs are (loss, new weights).
    let mut args = npz::read_inputs(inputs_path, &m.entry_param_shapes())?;
    // Built once: the evaluation plans are reused by every step.
    let interpreter = interp::Interpreter::new(&m);
    for step in 0..steps {
        let mut out = interpreter.run(&args).map_err(|d| anyhow::anyhow!(hlo_ir::Diagnostics::from(d).render(src, "mlp_train.hlo", false)))?;
        let loss = out[0].to_f64_vec()?[0];
        println!("step {step:3}: loss {loss:.6}");
        for (slot, new) in args.iter_mut().take(4).zip(out.drain(1..)) {
            *slot = new;
        }
    }
    Ok(())
}
