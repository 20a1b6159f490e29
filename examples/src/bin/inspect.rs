//! Parses and verifies an HLO module (the bundled MLP training step by default) through
//! the library API and prints what it contains: a minimal embedding of `hlo-ir`.
//!
//! `cargo run -p hlo-examples --bin inspect [FILE]`

use std::collections::BTreeMap;

fn main() -> anyhow::Result<()> {
    let (path, src) = match std::env::args().nth(1) {
        Some(p) => (p.clone(), std::fs::read_to_string(&p)?),
        None => {
            ("examples/models/mlp_train.hlo".to_string(), hlo_examples::MLP_TRAIN_HLO.to_string())
        }
    };
    let module = match hlo_driver::parse(&src) {
        Ok(m) => m,
        Err(diags) => {
            eprint!("{}", diags.render(&src, &path, false));
            anyhow::bail!("{path} has {} error(s)", diags.error_count());
        }
    };
    println!(
        "module `{}`: {} computations, {} instructions",
        module.name,
        module.comps().len(),
        module.instr_count()
    );
    let entry = module.entry();
    println!("entry `{}` takes {} parameters:", entry.name, entry.params().len());
    for p in entry.params() {
        let i = entry.instr(p);
        let at = i.metadata.as_ref().and_then(|m| m.op_name()).unwrap_or("");
        println!("  {:<12} {:<20} {at}", i.name, i.shape.to_string());
    }
    let mut histogram: BTreeMap<&str, usize> = BTreeMap::new();
    for c in module.comps() {
        for i in c.graph().node_weights() {
            *histogram.entry(i.op.opcode().name()).or_default() += 1;
        }
    }
    let mut ops: Vec<_> = histogram.into_iter().collect();
    ops.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let line: Vec<String> = ops.iter().map(|(o, n)| format!("{o} {n}")).collect();
    println!("opcodes: {}", line.join(", "));
    Ok(())
}
