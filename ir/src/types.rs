//! Element types, dimensions, layouts and shapes.

use std::fmt;

macro_rules! elem_types {
    ($($variant:ident => $name:literal, $bits:expr, $class:ident;)*) => {
        /// Every XLA primitive element type. Later stages support a subset and refuse the
        /// rest with a diagnostic; the IR carries them all so any module parses.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum ElemType { $($variant),* }

        impl ElemType {
            pub const ALL: &'static [ElemType] = &[$(ElemType::$variant),*];
            /// The spelling in HLO text (`f32`, `bf16`, `pred`, ...).
            pub fn name(self) -> &'static str {
                match self { $(ElemType::$variant => $name),* }
            }
            /// Parses an HLO element-type spelling.
            pub fn from_name(s: &str) -> Option<ElemType> {
                match s { $($name => Some(ElemType::$variant),)* _ => None }
            }
            /// Storage width in bits of one element (`pred` is 8: one byte in memory).
            pub fn bits(self) -> u32 {
                match self { $(ElemType::$variant => $bits),* }
            }
            pub fn class(self) -> ElemClass {
                match self { $(ElemType::$variant => ElemClass::$class),* }
            }
        }
    };
}

elem_types! {
    Pred => "pred", 8, Pred;
    S1 => "s1", 1, Signed;
    S2 => "s2", 2, Signed;
    S4 => "s4", 4, Signed;
    S8 => "s8", 8, Signed;
    S16 => "s16", 16, Signed;
    S32 => "s32", 32, Signed;
    S64 => "s64", 64, Signed;
    U1 => "u1", 1, Unsigned;
    U2 => "u2", 2, Unsigned;
    U4 => "u4", 4, Unsigned;
    U8 => "u8", 8, Unsigned;
    U16 => "u16", 16, Unsigned;
    U32 => "u32", 32, Unsigned;
    U64 => "u64", 64, Unsigned;
    F16 => "f16", 16, Float;
    BF16 => "bf16", 16, Float;
    F32 => "f32", 32, Float;
    F64 => "f64", 64, Float;
    C64 => "c64", 64, Complex;
    C128 => "c128", 128, Complex;
    F8E5M2 => "f8e5m2", 8, Float;
    F8E4M3 => "f8e4m3", 8, Float;
    F8E4M3FN => "f8e4m3fn", 8, Float;
    F8E4M3B11FNUZ => "f8e4m3b11fnuz", 8, Float;
    F8E3M4 => "f8e3m4", 8, Float;
    F8E5M2FNUZ => "f8e5m2fnuz", 8, Float;
    F8E4M3FNUZ => "f8e4m3fnuz", 8, Float;
    F4E2M1FN => "f4e2m1fn", 4, Float;
    F8E8M0FNU => "f8e8m0fnu", 8, Float;
}

/// Coarse element-type classes used by typing rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElemClass {
    Pred,
    Signed,
    Unsigned,
    Float,
    Complex,
}

impl ElemType {
    pub fn is_float(self) -> bool {
        self.class() == ElemClass::Float
    }
    pub fn is_integer(self) -> bool {
        matches!(self.class(), ElemClass::Signed | ElemClass::Unsigned)
    }
    pub fn is_complex(self) -> bool {
        self.class() == ElemClass::Complex
    }
}

impl fmt::Display for ElemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One dimension of an array shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dim {
    /// A size known at compile time.
    Static(u64),
    /// `<=N`: a runtime size of at most N (XLA bounded dynamism).
    Bounded(u64),
    /// `?`: a runtime size with no bound.
    Unbounded,
}

impl Dim {
    pub fn is_static(self) -> bool {
        matches!(self, Dim::Static(_))
    }
    /// The static size or the bound; `None` for `?`.
    pub fn bound(self) -> Option<u64> {
        match self {
            Dim::Static(n) | Dim::Bounded(n) => Some(n),
            Dim::Unbounded => None,
        }
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Static(n) => write!(f, "{n}"),
            Dim::Bounded(n) => write!(f, "<={n}"),
            Dim::Unbounded => f.write_str("?"),
        }
    }
}

/// A physical layout: the minor-to-major dimension order plus, verbatim, any extension
/// after `:` (tiles `T(8,128)`, memory space `S(1)`, element size `E(4)`, ...). The
/// extension is kept and printed back but not interpreted.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Layout {
    pub minor_to_major: Vec<u32>,
    pub ext: Option<Box<str>>,
}

impl Layout {
    /// The default row-major layout of a rank-`rank` array (`{rank-1,...,1,0}`).
    pub fn row_major(rank: usize) -> Layout {
        Layout { minor_to_major: (0..rank as u32).rev().collect(), ext: None }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, d) in self.minor_to_major.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
        }
        if let Some(ext) = &self.ext {
            write!(f, ":{ext}")?;
        }
        f.write_str("}")
    }
}

/// An array shape: element type, dimensions, optional layout.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ArrayShape {
    pub elem: ElemType,
    pub dims: Vec<Dim>,
    /// Boxed: most shapes in a module carry the default layout or none, and a small
    /// `Shape` keeps graphs and parser stacks compact.
    pub layout: Option<Box<Layout>>,
}

impl ArrayShape {
    /// The tiles, memory space and element size its layout writes (none without a layout).
    pub fn layout_fields(&self) -> LayoutFields {
        layout_fields(self)
    }

    /// Its elements as its layout's first tile pads them (XLA's `ShapeUtil::ArraySize`;
    /// dynamic dimensions at their bound); `None` when its layout has no tile.
    pub fn tiled_elements(&self) -> Option<u64> {
        let fields = self.layout_fields();
        let tile = fields.tiles.first()?;
        let dims: Vec<u64> = self.dims.iter().map(|d| d.bound().unwrap_or(0)).collect();
        // Physical dimensions, minor first (the layout's minor_to_major; row-major without
        // one).
        let rank = dims.len();
        let order: Vec<usize> = match self.layout.as_ref() {
            Some(l) if l.minor_to_major.len() == rank => {
                l.minor_to_major.iter().map(|&d| d as usize).collect()
            }
            _ => (0..rank).rev().collect(),
        };
        Some(tiled_elements(&dims, &order, tile))
    }

    pub fn rank(&self) -> usize {
        self.dims.len()
    }
    /// Static sizes, or `None` if any dimension is dynamic.
    pub fn static_dims(&self) -> Option<Vec<u64>> {
        self.dims.iter().map(|d| if let Dim::Static(n) = d { Some(*n) } else { None }).collect()
    }
    /// Number of elements, counting bounded dims at their bound; `None` if unbounded.
    pub fn element_count(&self) -> Option<u64> {
        self.dims.iter().try_fold(1u64, |acc, d| acc.checked_mul(d.bound()?))
    }
    pub fn is_static(&self) -> bool {
        self.dims.iter().all(|d| d.is_static())
    }
    /// Same element type and dims, layouts ignored.
    pub fn compatible(&self, other: &ArrayShape) -> bool {
        self.elem == other.elem && self.dims == other.dims
    }
}

/// The shape of an HLO value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Shape {
    Array(ArrayShape),
    Tuple(Vec<Shape>),
    /// `token[]`: ordering-only values.
    Token,
    /// `opaque[]`.
    Opaque,
    /// `b(shape)`: an experimental buffer type; parsed and printed, refused later.
    Buffer(Box<Shape>),
}

impl Shape {
    pub fn array(elem: ElemType, dims: &[u64]) -> Shape {
        Shape::Array(ArrayShape {
            elem,
            dims: dims.iter().map(|&d| Dim::Static(d)).collect(),
            layout: None,
        })
    }
    pub fn scalar(elem: ElemType) -> Shape {
        Shape::array(elem, &[])
    }
    /// Whether the shape holds a complex array anywhere (tuples and buffers included).
    pub fn has_complex(&self) -> bool {
        match self {
            Shape::Array(a) => a.elem.is_complex(),
            Shape::Tuple(t) => t.iter().any(Shape::has_complex),
            Shape::Buffer(b) => b.has_complex(),
            Shape::Token | Shape::Opaque => false,
        }
    }
    pub fn as_array(&self) -> Option<&ArrayShape> {
        match self {
            Shape::Array(a) => Some(a),
            _ => None,
        }
    }
    pub fn tuple_elements(&self) -> Option<&[Shape]> {
        match self {
            Shape::Tuple(t) => Some(t),
            _ => None,
        }
    }
    pub fn is_tuple(&self) -> bool {
        matches!(self, Shape::Tuple(_))
    }
    /// Number of array leaves (a tuple counts its leaves recursively; an array is one).
    pub fn leaf_count(&self) -> usize {
        match self {
            Shape::Tuple(t) => t.iter().map(Shape::leaf_count).sum(),
            _ => 1,
        }
    }
    /// Structural equality that ignores layouts.
    pub fn compatible(&self, other: &Shape) -> bool {
        match (self, other) {
            (Shape::Array(a), Shape::Array(b)) => a.compatible(b),
            (Shape::Tuple(a), Shape::Tuple(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.compatible(y))
            }
            (Shape::Buffer(a), Shape::Buffer(b)) => a.compatible(b),
            (Shape::Token, Shape::Token) | (Shape::Opaque, Shape::Opaque) => true,
            _ => false,
        }
    }
    /// The shape with every array that has no layout given the default row-major one
    /// (scalars keep none: XLA prints `f32[]`, never `f32[]{}`).
    pub fn with_default_layouts(&self) -> Shape {
        match self {
            Shape::Array(a) if a.layout.is_none() && !a.dims.is_empty() => {
                Shape::Array(ArrayShape {
                    layout: Some(Box::new(Layout::row_major(a.dims.len()))),
                    ..a.clone()
                })
            }
            Shape::Tuple(t) => Shape::Tuple(t.iter().map(Shape::with_default_layouts).collect()),
            Shape::Buffer(b) => Shape::Buffer(Box::new(b.with_default_layouts())),
            s => s.clone(),
        }
    }
    /// Visits every array shape, depth first.
    pub fn for_each_array(&self, f: &mut impl FnMut(&ArrayShape)) {
        match self {
            Shape::Array(a) => f(a),
            Shape::Tuple(t) => t.iter().for_each(|s| s.for_each_array(f)),
            Shape::Buffer(b) => b.for_each_array(f),
            Shape::Token | Shape::Opaque => {}
        }
    }
    /// Writes the shape; `layouts = false` drops layouts (computation signatures).
    pub fn write(&self, out: &mut String, layouts: bool) {
        use std::fmt::Write;
        match self {
            Shape::Array(a) => {
                out.push_str(a.elem.name());
                out.push('[');
                for (i, d) in a.dims.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{d}");
                }
                out.push(']');
                if layouts && let Some(l) = &a.layout {
                    let _ = write!(out, "{l}");
                }
            }
            Shape::Tuple(t) => {
                out.push('(');
                for (i, s) in t.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    s.write(out, layouts);
                }
                out.push(')');
            }
            Shape::Token => out.push_str("token[]"),
            Shape::Opaque => out.push_str("opaque[]"),
            Shape::Buffer(s) => {
                out.push_str("b(");
                s.write(out, layouts);
                out.push(')');
            }
        }
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::new();
        self.write(&mut s, true);
        f.write_str(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for &t in ElemType::ALL {
            assert_eq!(ElemType::from_name(t.name()), Some(t));
        }
        assert_eq!(ElemType::from_name("f33"), None);
    }

    #[test]
    fn display() {
        let s = Shape::Tuple(vec![
            Shape::Array(ArrayShape {
                elem: ElemType::F32,
                dims: vec![Dim::Static(2), Dim::Bounded(3), Dim::Unbounded],
                layout: Some(Box::new(Layout {
                    minor_to_major: vec![2, 1, 0],
                    ext: Some("T(8,128)".into()),
                })),
            }),
            Shape::Token,
        ]);
        assert_eq!(s.to_string(), "(f32[2,<=3,?]{2,1,0:T(8,128)}, token[])");
    }
}

/// What a layout's extension (after `:`) says about how an array is stored.
#[derive(Debug, Default, PartialEq, Clone)]
pub struct LayoutFields {
    /// Tiles, outermost first (`T(8,128)(2,1)`: `[[8,128],[2,1]]`); a `*` (combined
    /// dimension) reads as 1.
    pub tiles: Vec<Vec<u64>>,
    /// The memory space (`S(n)`; 0: the device's main memory).
    pub memory_space: u64,
    /// Bits per element when the layout sets them (`E(n)`).
    pub element_bits: Option<u64>,
}

/// Reads the tiles `T(..)(..)`, the memory space `S(n)` and the element size `E(n)` of
/// `a`'s layout; other fields (`L`, `P`, `SC`, `D`, ...) are skipped.
fn layout_fields(a: &ArrayShape) -> LayoutFields {
    let mut e = LayoutFields::default();
    let Some(ext) = a.layout.as_ref().and_then(|l| l.ext.as_deref()) else { return e };
    let b = ext.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let start = i;
        while i < b.len() && b[i] != b'(' {
            i += 1;
        }
        let name = ext[start..i].trim();
        // Every parenthesized group that follows the name.
        let mut groups: Vec<&str> = Vec::new();
        while i < b.len() && b[i] == b'(' {
            let Some(end) = ext[i..].find(')') else { return e };
            groups.push(&ext[i + 1..i + end]);
            i += end + 1;
        }
        let number = |g: Option<&&str>| g.and_then(|g| g.trim().parse::<u64>().ok());
        match name {
            "T" => {
                e.tiles = groups
                    .iter()
                    .map(|g| g.split(',').map(|d| d.trim().parse::<u64>().unwrap_or(1)).collect())
                    .collect()
            }
            "S" => e.memory_space = number(groups.first()).unwrap_or(0),
            "E" => e.element_bits = number(groups.first()).filter(|&n| n > 0),
            _ => {}
        }
        if groups.is_empty() {
            i += 1;
        }
    }
    e
}

/// Elements of an array of dimensions `dims`, laid out minor first in `order`, padded to
/// `tile` (its last entry tiles the minor dimension): XLA's `ShapeUtil::ArraySize`, which
/// pads to the first tile only (later tiles divide it) and pads a tile's dimensions beyond
/// the array's rank from 1.
fn tiled_elements(dims: &[u64], order: &[usize], tile: &[u64]) -> u64 {
    let mut n: u64 = 1;
    for (k, &t) in tile.iter().rev().enumerate() {
        let d = order.get(k).map_or(1, |&i| dims[i]);
        n = n.saturating_mul(d.div_ceil(t.max(1)) * t.max(1));
    }
    for &i in order.iter().skip(tile.len()) {
        n = n.saturating_mul(dims[i]);
    }
    n
}
