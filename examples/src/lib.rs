//! Programs that embed the toolchain as a library, and the models they ship with.

/// One SGD step of a 2-layer tanh MLP with softmax cross-entropy, as JAX prints it in
/// XLA's dump style (regenerate with `examples/models/gen_mlp_train.py`).
pub const MLP_TRAIN_HLO: &str = include_str!("../models/mlp_train.hlo");

pub mod lm;
