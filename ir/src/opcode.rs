//! The closed set of HLO opcodes: spelling, operand count and category, in one table
//! shared by the parser, the printer and the verifier.

macro_rules! opcodes {
    ($($variant:ident => $name:literal, $arity:expr, $cat:ident;)*) => {
        /// Every opcode of XLA's `HLO_OPCODE_LIST` (plus the async `*-start/-done` forms).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Opcode { $($variant),* }

        impl Opcode {
            pub const ALL: &'static [Opcode] = &[$(Opcode::$variant),*];
            /// The kebab-case spelling in HLO text.
            pub fn name(self) -> &'static str {
                match self { $(Opcode::$variant => $name),* }
            }
            pub fn from_name(s: &str) -> Option<Opcode> {
                match s { $($name => Some(Opcode::$variant),)* _ => None }
            }
            /// How many operands the opcode takes.
            pub fn arity(self) -> Arity {
                use Arity::*;
                match self { $(Opcode::$variant => $arity),* }
            }
            pub fn category(self) -> Category {
                match self { $(Opcode::$variant => Category::$cat),* }
            }
        }
    };
}

/// Operand-count rule of an opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arity {
    Exactly(usize),
    AtLeast(usize),
    /// `2N` operands with `N >= 1` (reduce, reduce-window: inputs then inits).
    Pairs,
    /// `2N + 1` operands with `N >= 1` (scatter: operands, indices, updates).
    PairsPlusOne,
}

impl Arity {
    pub fn accepts(self, n: usize) -> bool {
        match self {
            Arity::Exactly(k) => n == k,
            Arity::AtLeast(k) => n >= k,
            Arity::Pairs => n >= 2 && n.is_multiple_of(2),
            Arity::PairsPlusOne => n >= 3 && n % 2 == 1,
        }
    }
    pub fn describe(self) -> String {
        match self {
            Arity::Exactly(0) => "no operands".into(),
            Arity::Exactly(1) => "exactly 1 operand".into(),
            Arity::Exactly(k) => format!("exactly {k} operands"),
            Arity::AtLeast(k) => format!("at least {k} operand{}", if k == 1 { "" } else { "s" }),
            Arity::Pairs => "an even number (2N >= 2) of operands".into(),
            Arity::PairsPlusOne => "an odd number (2N+1 >= 3) of operands".into(),
        }
    }
}

/// Broad kinds of opcodes, used by passes that treat a whole family alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    /// Elementwise with one operand.
    Unary,
    /// Elementwise with two operands.
    Binary,
    /// Elementwise with three operands (select, clamp).
    Ternary,
    /// Reshapes, slices, broadcasts: moves data without arithmetic.
    Data,
    /// Reductions, windows, sorts.
    Reduction,
    /// Dot, convolution and other contractions.
    Contraction,
    /// Calls, loops, conditionals, fusions, tuples.
    Control,
    /// Cross-device communication.
    Collective,
    /// Host I/O, tokens, random state: side effects.
    SideEffect,
    /// Opaque or runtime-shaped operations.
    Other,
}

opcodes! {
    Abs => "abs", Exactly(1), Unary;
    Acos => "acos", Exactly(1), Unary;
    Acosh => "acosh", Exactly(1), Unary;
    Add => "add", Exactly(2), Binary;
    AddDependency => "add-dependency", Exactly(2), Control;
    AfterAll => "after-all", AtLeast(0), SideEffect;
    AllGather => "all-gather", AtLeast(1), Collective;
    AllGatherDone => "all-gather-done", Exactly(1), Collective;
    AllGatherStart => "all-gather-start", AtLeast(1), Collective;
    AllReduce => "all-reduce", AtLeast(1), Collective;
    AllReduceDone => "all-reduce-done", Exactly(1), Collective;
    AllReduceStart => "all-reduce-start", AtLeast(1), Collective;
    AllToAll => "all-to-all", AtLeast(1), Collective;
    And => "and", Exactly(2), Binary;
    Asin => "asin", Exactly(1), Unary;
    Asinh => "asinh", Exactly(1), Unary;
    AsyncDone => "async-done", Exactly(1), Control;
    AsyncStart => "async-start", AtLeast(0), Control;
    AsyncUpdate => "async-update", Exactly(1), Control;
    Atan2 => "atan2", Exactly(2), Binary;
    Atanh => "atanh", Exactly(1), Unary;
    BatchNormGrad => "batch-norm-grad", Exactly(5), Other;
    BatchNormInference => "batch-norm-inference", Exactly(5), Other;
    BatchNormTraining => "batch-norm-training", Exactly(3), Other;
    Bitcast => "bitcast", Exactly(1), Data;
    BitcastConvert => "bitcast-convert", Exactly(1), Unary;
    Broadcast => "broadcast", Exactly(1), Data;
    Call => "call", AtLeast(0), Control;
    Cbrt => "cbrt", Exactly(1), Unary;
    Ceil => "ceil", Exactly(1), Unary;
    Cholesky => "cholesky", Exactly(1), Contraction;
    Clamp => "clamp", Exactly(3), Ternary;
    Clz => "count-leading-zeros", Exactly(1), Unary;
    CollectiveBroadcast => "collective-broadcast", AtLeast(1), Collective;
    CollectivePermute => "collective-permute", AtLeast(1), Collective;
    CollectivePermuteDone => "collective-permute-done", Exactly(1), Collective;
    CollectivePermuteStart => "collective-permute-start", AtLeast(1), Collective;
    Compare => "compare", Exactly(2), Binary;
    Complex => "complex", Exactly(2), Binary;
    Concatenate => "concatenate", AtLeast(1), Data;
    Conditional => "conditional", AtLeast(1), Control;
    Constant => "constant", Exactly(0), Data;
    Convert => "convert", Exactly(1), Unary;
    Convolution => "convolution", Exactly(2), Contraction;
    Copy => "copy", Exactly(1), Data;
    CopyDone => "copy-done", Exactly(1), Data;
    CopyStart => "copy-start", Exactly(1), Data;
    Cos => "cosine", Exactly(1), Unary;
    Cosh => "cosh", Exactly(1), Unary;
    CustomCall => "custom-call", AtLeast(0), Other;
    Divide => "divide", Exactly(2), Binary;
    Domain => "domain", Exactly(1), Data;
    Dot => "dot", Exactly(2), Contraction;
    DynamicReshape => "dynamic-reshape", AtLeast(1), Data;
    DynamicSlice => "dynamic-slice", AtLeast(1), Data;
    DynamicUpdateSlice => "dynamic-update-slice", AtLeast(2), Data;
    Erf => "erf", Exactly(1), Unary;
    Exp => "exponential", Exactly(1), Unary;
    Expm1 => "exponential-minus-one", Exactly(1), Unary;
    Fft => "fft", Exactly(1), Contraction;
    Floor => "floor", Exactly(1), Unary;
    Fusion => "fusion", AtLeast(0), Control;
    Gather => "gather", Exactly(2), Data;
    GetDimensionSize => "get-dimension-size", Exactly(1), Data;
    GetTupleElement => "get-tuple-element", Exactly(1), Control;
    Imag => "imag", Exactly(1), Unary;
    Infeed => "infeed", Exactly(1), SideEffect;
    Iota => "iota", Exactly(0), Data;
    IsFinite => "is-finite", Exactly(1), Unary;
    Log => "log", Exactly(1), Unary;
    Log1p => "log-plus-one", Exactly(1), Unary;
    Logistic => "logistic", Exactly(1), Unary;
    Map => "map", AtLeast(1), Reduction;
    Maximum => "maximum", Exactly(2), Binary;
    Minimum => "minimum", Exactly(2), Binary;
    Multiply => "multiply", Exactly(2), Binary;
    Negate => "negate", Exactly(1), Unary;
    Not => "not", Exactly(1), Unary;
    OptBarrier => "opt-barrier", Exactly(1), Control;
    Or => "or", Exactly(2), Binary;
    Outfeed => "outfeed", Exactly(2), SideEffect;
    Pad => "pad", Exactly(2), Data;
    Parameter => "parameter", Exactly(0), Control;
    PartitionId => "partition-id", Exactly(0), Collective;
    PopCnt => "popcnt", Exactly(1), Unary;
    Power => "power", Exactly(2), Binary;
    RaggedAllToAll => "ragged-all-to-all", Exactly(6), Collective;
    RaggedDot => "ragged-dot", Exactly(3), Contraction;
    Real => "real", Exactly(1), Unary;
    Recv => "recv", Exactly(1), SideEffect;
    RecvDone => "recv-done", Exactly(1), SideEffect;
    Reduce => "reduce", Pairs, Reduction;
    ReducePrecision => "reduce-precision", Exactly(1), Unary;
    ReduceScatter => "reduce-scatter", AtLeast(1), Collective;
    ReduceWindow => "reduce-window", Pairs, Reduction;
    Remainder => "remainder", Exactly(2), Binary;
    ReplicaId => "replica-id", Exactly(0), Collective;
    Reshape => "reshape", Exactly(1), Data;
    Reverse => "reverse", Exactly(1), Data;
    Rng => "rng", Exactly(2), SideEffect;
    RngBitGenerator => "rng-bit-generator", Exactly(1), Other;
    RngGetAndUpdateState => "rng-get-and-update-state", Exactly(0), SideEffect;
    RoundNearestAfz => "round-nearest-afz", Exactly(1), Unary;
    RoundNearestEven => "round-nearest-even", Exactly(1), Unary;
    Rsqrt => "rsqrt", Exactly(1), Unary;
    ScaledDot => "scaled-dot", Exactly(4), Contraction;
    Scan => "scan", AtLeast(1), Reduction;
    Scatter => "scatter", PairsPlusOne, Data;
    Select => "select", Exactly(3), Ternary;
    SelectAndScatter => "select-and-scatter", Exactly(3), Reduction;
    Send => "send", Exactly(2), SideEffect;
    SendDone => "send-done", Exactly(1), SideEffect;
    SetDimensionSize => "set-dimension-size", Exactly(2), Data;
    ShiftLeft => "shift-left", Exactly(2), Binary;
    ShiftRightArithmetic => "shift-right-arithmetic", Exactly(2), Binary;
    ShiftRightLogical => "shift-right-logical", Exactly(2), Binary;
    Sign => "sign", Exactly(1), Unary;
    Sin => "sine", Exactly(1), Unary;
    Sinh => "sinh", Exactly(1), Unary;
    Slice => "slice", Exactly(1), Data;
    Sort => "sort", AtLeast(1), Reduction;
    Sqrt => "sqrt", Exactly(1), Unary;
    StochasticConvert => "stochastic-convert", Exactly(2), Binary;
    Subtract => "subtract", Exactly(2), Binary;
    Tan => "tan", Exactly(1), Unary;
    Tanh => "tanh", Exactly(1), Unary;
    TopK => "topk", Exactly(1), Reduction;
    Transpose => "transpose", Exactly(1), Data;
    TriangularSolve => "triangular-solve", Exactly(2), Contraction;
    Tuple => "tuple", AtLeast(0), Control;
    While => "while", Exactly(1), Control;
    Xor => "xor", Exactly(2), Binary;
}

impl Opcode {
    /// Elementwise opcodes: result dims equal operand dims, element by element.
    pub fn is_elementwise(self) -> bool {
        matches!(self.category(), Category::Unary | Category::Binary | Category::Ternary)
            && !matches!(self, Opcode::BitcastConvert)
    }

    /// Binary opcodes whose operands may be swapped: `add`, `multiply`, `maximum`,
    /// `minimum`, `and`, `or`, `xor`. (`compare` EQ/NE is commutative too; its direction is
    /// an attribute, so the caller decides.)
    pub fn is_commutative(self) -> bool {
        use Opcode::*;
        matches!(self, Add | Multiply | Maximum | Minimum | And | Or | Xor)
    }

    /// The closest opcode spellings, for "did you mean" hints.
    pub fn suggest(s: &str) -> Option<Opcode> {
        Opcode::ALL
            .iter()
            .map(|&op| (edit_distance(s, op.name()), op))
            .filter(|&(d, op)| d <= 2.max(op.name().len() / 4))
            .min_by_key(|&(d, _)| d)
            .map(|(_, op)| op)
    }
}

/// Levenshtein distance, for spelling suggestions.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, &cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_consistent() {
        for &op in Opcode::ALL {
            assert_eq!(Opcode::from_name(op.name()), Some(op));
        }
        assert!(Opcode::ALL.len() >= 130);
        assert_eq!(Opcode::suggest("mutliply"), Some(Opcode::Multiply));
        assert_eq!(Opcode::suggest("zzzzzzzzzz"), None);
    }
}
