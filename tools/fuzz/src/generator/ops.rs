//! The op builders of the generator: one method per kind of instruction (or family of
//! them), each picking operands among the values built so far, computing the result's
//! shape and whether its value stays exact, and writing the instruction's text; the
//! machinery they build with (values, parameters, constants, the module's text) is the
//! parent module's, which also picks the op of each step (`Gen::step`).

use std::fmt::Write as _;

use super::*;

impl Gen<'_, '_> {
    pub(super) fn unary(&mut self) -> Option<()> {
        let v = self.pick(|_| true)?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        // (op, keeps exactness, needs an exact operand, new bound)
        let (op, keeps, discontinuous, nb): (&str, bool, bool, f64) = if elem == Elem::Pred {
            ("not", true, false, 1.0)
        } else if elem.is_int() {
            let ops: &[&str] = if elem.is_signed() {
                &["negate", "abs", "not", "popcnt", "count-leading-zeros", "sign"]
            } else {
                &["not", "popcnt", "count-leading-zeros"]
            };
            let op = *self.rng.pick(ops);
            let nb = match op {
                "negate" | "abs" => bound + 1.0,
                "sign" => 1.0,
                "popcnt" | "count-leading-zeros" => elem.bits() as f64,
                _ => exact_int_bound(elem),
            };
            (op, true, false, nb)
        } else {
            let ops = [
                ("negate", true, false, bound),
                ("abs", true, false, bound),
                ("floor", true, true, bound),
                ("ceil", true, true, bound),
                ("round-nearest-even", true, true, bound),
                ("round-nearest-afz", true, true, bound),
                ("sign", true, true, 1.0),
                ("exponential", false, false, bound.exp()),
                ("log", false, true, bound.ln_1p() + 1.0),
                ("sqrt", false, true, bound.sqrt()),
                ("rsqrt", false, true, 1.0),
                ("tanh", false, false, 1.0),
                ("logistic", false, false, 1.0),
                ("sine", false, false, 1.0),
                ("cosine", false, false, 1.0),
                ("exponential-minus-one", false, false, bound.exp()),
                ("log-plus-one", false, true, bound.ln_1p() + 1.0),
                ("cbrt", false, true, bound.cbrt()),
                ("erf", false, false, 1.0),
                ("tan", false, true, 1e7),
                ("sinh", false, false, bound.exp()),
                ("cosh", false, false, bound.exp()),
                ("asin", false, true, 2.0),
                ("acos", false, true, 4.0),
                ("atanh", false, true, 20.0),
                ("asinh", false, false, bound.ln_1p() + 1.0),
                ("acosh", false, true, bound.ln_1p() + 1.0),
            ];
            *self.rng.pick(&ops)
        };
        if discontinuous && !exact {
            return None;
        }
        self.push(elem, dims, format!("{op}({name})"), exact && keeps, nb);
        Some(())
    }

    pub(super) fn binary(&mut self) -> Option<()> {
        let a = self.pick(|_| true)?;
        let Val { elem, dims, .. } = self.vals[a].clone();
        let b = self.need(elem, &dims);
        let (va, vb) = (self.vals[a].clone(), self.vals[b].clone());
        let exact = va.exact && vb.exact;
        let (ba, bb) = (va.bound, vb.bound);
        let (op, keeps, nb): (&str, bool, f64) = if elem == Elem::Pred {
            (*self.rng.pick(&["and", "or", "xor"]), true, 1.0)
        } else if elem.is_int() {
            let ops = [
                ("add", ba + bb),
                ("subtract", ba + bb),
                ("multiply", ba * bb),
                ("divide", ba),
                ("remainder", ba),
                ("maximum", ba.max(bb)),
                ("minimum", ba.max(bb)),
                ("and", ba.max(bb)),
                ("or", exact_int_bound(elem)),
                ("xor", exact_int_bound(elem)),
                ("shift-left", exact_int_bound(elem)),
                ("shift-right-logical", exact_int_bound(elem)),
                ("shift-right-arithmetic", ba),
                ("power", exact_int_bound(elem)),
            ];
            let (op, nb) = *self.rng.pick(&ops);
            (op, true, nb)
        } else {
            let ops = [
                ("add", true, ba + bb),
                ("subtract", true, ba + bb),
                ("multiply", true, ba * bb),
                ("maximum", true, ba.max(bb)),
                ("minimum", true, ba.max(bb)),
                ("remainder", true, ba),
                ("divide", false, ba),
                ("power", false, ba.max(1.0).powf(bb)),
                ("atan2", false, 4.0),
            ];
            let (op, keeps, nb) = *self.rng.pick(&ops);
            // Discontinuous (remainder) or singular near a zero operand, where the sign
            // of a zero decides (1/±0, atan2(±0, -1)): exact operands whose zeros' signs
            // no summation order or partition padding can change.
            if matches!(op, "remainder" | "divide" | "power" | "atan2")
                && !(exact && va.zero_sign && vb.zero_sign)
            {
                return None;
            }
            // remainder(x, 0) is a NaN, whose sign XLA does not define (a total-order
            // compare or sort would read it): not exact, so no sort key or compare takes it.
            let keeps = keeps && op != "remainder";
            (op, keeps, nb)
        };
        self.push(elem, dims, format!("{op}({}, {})", va.name, vb.name), exact && keeps, nb);
        Some(())
    }

    pub(super) fn compare_select(&mut self) -> Option<()> {
        let a = self.pick(|v| v.exact)?;
        let Val { elem, dims, .. } = self.vals[a].clone();
        let b = self.need(elem, &dims);
        if !self.vals[b].exact {
            return None;
        }
        let dir = *self.rng.pick(&["EQ", "NE", "LT", "LE", "GT", "GE"]);
        // A total order reads a NaN's sign, which XLA does not define: not with edge values.
        let total = elem.is_float() && !self.cfg.edge_values && self.rng.chance(1, 3);
        let ty = if total { ", type=TOTALORDER" } else { "" };
        let (na, nb) = (self.vals[a].name.clone(), self.vals[b].name.clone());
        let p = self.push(
            Elem::Pred,
            dims.clone(),
            format!("compare({na}, {nb}), direction={dir}{ty}"),
            true,
            1.0,
        );
        if self.rng.chance(2, 3) {
            // select between two values of one type, by this predicate.
            let x = self.pick(|v| v.dims == dims)?;
            let ex = self.vals[x].elem;
            let y = self.need(ex, &dims);
            let (vx, vy) = (self.vals[x].clone(), self.vals[y].clone());
            let pn = self.vals[p].name.clone();
            self.push(
                ex,
                dims,
                format!("select({pn}, {}, {})", vx.name, vy.name),
                vx.exact && vy.exact,
                vx.bound.max(vy.bound),
            );
        }
        Some(())
    }

    pub(super) fn convert(&mut self) -> Option<()> {
        let v = self.pick(|_| true)?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        let to = self.random_elem();
        if to == elem {
            return None;
        }
        if self.rng.chance(1, 6) {
            // bitcast-convert between a float and the integer of its width.
            let to = elem.same_width_int()?;
            // A NaN's payload and sign are not defined by XLA: its bits are not compared.
            if !exact || self.cfg.edge_values {
                return None;
            }
            self.push(to, dims, format!("bitcast-convert({name})"), true, exact_int_bound(to));
            return Some(());
        }
        // Conversions whose result depends on more than the value's rounding: float to
        // integer or predicate reads a threshold, so only from exact values; float to an
        // unsigned type or out of range is implementation-defined in XLA.
        if elem.is_float()
            && !to.is_float()
            && (!exact || !to.is_signed() && to != Elem::Pred || bound > to.exact_limit())
        {
            return None;
        }
        let nb = match (elem, to) {
            (_, Elem::Pred) => 1.0,
            (e, t) if e.is_int() && t.is_int() && bound > t.exact_limit() => exact_int_bound(t),
            _ => bound,
        };
        // A float converted to a narrower float is rounded: exact only within its mantissa.
        let exact = exact || !to.is_float() && !elem.is_float();
        self.push(to, dims, format!("convert({name})"), exact, nb);
        Some(())
    }

    pub(super) fn broadcast(&mut self) -> Option<()> {
        let v = self.pick(|v| v.dims.len() < 3)?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        let extra = 1 + self.rng.below(3 - dims.len());
        let rank = dims.len() + extra;
        // Operand dim i goes to output dim map[i] (increasing).
        let mut slots: Vec<usize> = self.rng.permutation(rank)[..dims.len()].to_vec();
        slots.sort_unstable();
        let mut out = vec![0u64; rank];
        for (i, &s) in slots.iter().enumerate() {
            out[s] = dims[i];
        }
        for d in out.iter_mut().filter(|d| **d == 0) {
            *d = self.rng.range(1, self.cfg.max_dim as i64) as u64;
        }
        let map: Vec<u64> = slots.iter().map(|&s| s as u64).collect();
        self.push(
            elem,
            out,
            format!("broadcast({name}), dimensions={{{}}}", list(&map)),
            exact,
            bound,
        );
        Some(())
    }

    pub(super) fn reshape(&mut self) -> Option<()> {
        let v = self.pick(|_| true)?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        let n = count(&dims);
        // A random factorization of n into up to 3 dims (1s allowed).
        let mut out = Vec::new();
        let mut rest = n;
        let rank = 1 + self.rng.below(3);
        for _ in 0..rank - 1 {
            let divs: Vec<u64> = (1..=rest).filter(|d| rest.is_multiple_of(*d)).collect();
            let d = *self.rng.pick(&divs);
            out.push(d);
            rest /= d;
        }
        out.push(rest);
        if n == 1 && self.rng.chance(1, 2) {
            out.clear();
        }
        self.push(elem, out, format!("reshape({name})"), exact, bound);
        Some(())
    }

    pub(super) fn transpose(&mut self) -> Option<()> {
        let v = self.pick(|v| v.dims.len() >= 2)?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        let perm = self.rng.permutation(dims.len());
        let out: Vec<u64> = perm.iter().map(|&p| dims[p]).collect();
        let p: Vec<u64> = perm.iter().map(|&p| p as u64).collect();
        self.push(
            elem,
            out,
            format!("transpose({name}), dimensions={{{}}}", list(&p)),
            exact,
            bound,
        );
        Some(())
    }

    pub(super) fn slice(&mut self) -> Option<()> {
        let v = self.pick(|v| !v.dims.is_empty())?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        let mut parts = Vec::new();
        let mut out = Vec::new();
        for &d in &dims {
            let start = self.rng.below(d as usize) as u64;
            let limit = start + 1 + self.rng.below((d - start) as usize) as u64;
            let stride = 1 + self.rng.below(2) as u64;
            parts.push(format!("[{start}:{limit}:{stride}]"));
            out.push((limit - start).div_ceil(stride));
        }
        self.push(
            elem,
            out,
            format!("slice({name}), slice={{{}}}", parts.join(", ")),
            exact,
            bound,
        );
        Some(())
    }

    pub(super) fn concatenate(&mut self) -> Option<()> {
        let v = self.pick(|v| !v.dims.is_empty())?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        let d = self.rng.below(dims.len());
        let mut other = dims.clone();
        other[d] = self.rng.range(1, self.cfg.max_dim as i64) as u64;
        let w = self.need(elem, &other);
        let vw = self.vals[w].clone();
        let mut out = dims.clone();
        out[d] += other[d];
        self.push(
            elem,
            out,
            format!("concatenate({name}, {}), dimensions={{{d}}}", vw.name),
            exact && vw.exact,
            bound.max(vw.bound),
        );
        Some(())
    }

    pub(super) fn pad(&mut self) -> Option<()> {
        let v = self.pick(|v| !v.dims.is_empty())?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        let c = self.constant(elem);
        let vc = self.vals[c].clone();
        let mut cfg = Vec::new();
        let mut out = Vec::new();
        for &d in &dims {
            let interior = if self.rng.chance(1, 4) { 1 } else { 0 };
            let base = d + (d - 1) * interior;
            let lo = self.rng.range(-1, 2);
            let hi = self.rng.range(-1, 2);
            let (lo, hi) = if base as i64 + lo + hi < 1 { (0, 0) } else { (lo, hi) };
            cfg.push(format!("{lo}_{hi}_{interior}"));
            out.push((base as i64 + lo + hi) as u64);
        }
        self.push(
            elem,
            out,
            format!("pad({name}, {}), padding={}", vc.name, cfg.join("x")),
            exact && vc.exact,
            bound.max(vc.bound),
        );
        Some(())
    }

    pub(super) fn reverse_or_clamp(&mut self) -> Option<()> {
        let v = self.pick(|v| v.elem != Elem::Pred)?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        if !dims.is_empty() && self.rng.chance(1, 2) {
            let mut ds: Vec<u64> =
                (0..dims.len() as u64).filter(|_| self.rng.chance(1, 2)).collect();
            if ds.is_empty() {
                ds.push(0);
            }
            self.push(
                elem,
                dims,
                format!("reverse({name}), dimensions={{{}}}", list(&ds)),
                exact,
                bound,
            );
            return Some(());
        }
        let lo = self.constant(elem);
        let hi = self.constant(elem);
        let (l, h) = (self.vals[lo].clone(), self.vals[hi].clone());
        self.push(
            elem,
            dims,
            format!("clamp({}, {name}, {})", l.name, h.name),
            exact && l.exact && h.exact,
            bound.max(l.bound).max(h.bound),
        );
        Some(())
    }

    pub(super) fn dot(&mut self) -> Option<()> {
        let a = self.pick(|v| !v.dims.is_empty() && v.elem != Elem::Pred)?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[a].clone();
        let r = dims.len();
        let c = self.rng.below(r);
        let batch = if r >= 2 && self.rng.chance(1, 3) {
            let b = (c + 1 + self.rng.below(r - 1)) % r;
            Some(b)
        } else {
            None
        };
        let free: Vec<usize> = (0..r).filter(|&i| i != c && Some(i) != batch).collect();
        // rhs: [batch?, contracting, free?] in a random order.
        let mut rhs_parts: Vec<(char, u64)> = Vec::new();
        if let Some(b) = batch {
            rhs_parts.push(('b', dims[b]));
        }
        rhs_parts.push(('c', dims[c]));
        if self.rng.chance(2, 3) {
            rhs_parts.push(('f', self.rng.range(1, self.cfg.max_dim as i64) as u64));
        }
        let order = self.rng.permutation(rhs_parts.len());
        let rhs_parts: Vec<(char, u64)> = order.iter().map(|&i| rhs_parts[i]).collect();
        let rhs_dims: Vec<u64> = rhs_parts.iter().map(|p| p.1).collect();
        let pos = |k: char| rhs_parts.iter().position(|p| p.0 == k);
        let b = self.need(elem, &rhs_dims);
        let vb = self.vals[b].clone();
        let mut out = Vec::new();
        let mut attrs = String::new();
        if let (Some(lb), Some(rb)) = (batch, pos('b')) {
            out.push(dims[lb]);
            write!(attrs, ", lhs_batch_dims={{{lb}}}, rhs_batch_dims={{{rb}}}").ok();
        }
        out.extend(free.iter().map(|&i| dims[i]));
        if let Some(f) = pos('f') {
            out.push(rhs_dims[f]);
        }
        write!(attrs, ", lhs_contracting_dims={{{c}}}, rhs_contracting_dims={{{}}}", pos('c')?)
            .ok();
        let nb = bound * vb.bound * dims[c] as f64;
        self.push(elem, out, format!("dot({name}, {}){attrs}", vb.name), exact && vb.exact, nb);
        Some(())
    }

    /// The reducer of `elem` (`op`) and its identity.
    pub(super) fn reducer(
        &mut self,
        elem: Elem,
        maxmin_only: bool,
    ) -> (String, &'static str, String) {
        let ops: &[&str] = if elem == Elem::Pred {
            &["and", "or"]
        } else if maxmin_only {
            &["maximum", "minimum", "add"]
        } else {
            &["add", "maximum", "minimum", "multiply"]
        };
        let op = *self.rng.pick(ops);
        let init = identity(op, elem);
        let comp = self.binary_comp(op, elem);
        (comp, op, init)
    }

    pub(super) fn reduce(&mut self) -> Option<()> {
        let v = self.pick(|v| !v.dims.is_empty())?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        let mut rd: Vec<usize> = (0..dims.len()).filter(|_| self.rng.chance(1, 2)).collect();
        if rd.is_empty() {
            rd.push(self.rng.below(dims.len()));
        }
        let (comp, op, init) = self.reducer(elem, false);
        let ini = self.push(elem, vec![], format!("constant({init})"), true, 1.0);
        let n: u64 = rd.iter().map(|&d| dims[d]).product();
        let out: Vec<u64> = (0..dims.len()).filter(|d| !rd.contains(d)).map(|d| dims[d]).collect();
        let nb = match op {
            "add" => bound * n as f64,
            "multiply" => bound.max(1.0).powi(n as i32),
            _ => bound,
        };
        let rdl: Vec<u64> = rd.iter().map(|&d| d as u64).collect();
        let iname = self.vals[ini].name.clone();
        self.push(
            elem,
            out,
            format!("reduce({name}, {iname}), dimensions={{{}}}, to_apply={comp}", list(&rdl)),
            exact,
            nb,
        );
        Some(())
    }

    /// A window over `dims`: (text, output dims, window element count).
    pub(super) fn window(&mut self, dims: &[u64], dilations: bool) -> (String, Vec<u64>, u64) {
        let (mut size, mut stride, mut pad, mut lhs, mut rhs, mut out) =
            (vec![], vec![], vec![], vec![], vec![], vec![]);
        let mut elems = 1;
        for &d in dims {
            let ld = if dilations && self.rng.chance(1, 6) { 2 } else { 1 };
            let rd = if dilations && self.rng.chance(1, 6) { 2 } else { 1 };
            let (plo, phi) = (self.rng.range(0, 1) as u64, self.rng.range(0, 1) as u64);
            let padded = (d - 1) * ld + 1 + plo + phi;
            let maxw = ((padded - 1) / rd + 1).min(3);
            let w = 1 + self.rng.below(maxw as usize) as u64;
            let s = 1 + self.rng.below(2) as u64;
            let span = (w - 1) * rd + 1;
            out.push((padded - span) / s + 1);
            size.push(w.to_string());
            stride.push(s.to_string());
            pad.push(format!("{plo}_{phi}"));
            lhs.push(ld.to_string());
            rhs.push(rd.to_string());
            elems *= w;
        }
        let mut t =
            format!("size={} stride={} pad={}", size.join("x"), stride.join("x"), pad.join("x"));
        if lhs.iter().any(|x| x != "1") {
            write!(t, " lhs_dilate={}", lhs.join("x")).ok();
        }
        if rhs.iter().any(|x| x != "1") {
            write!(t, " rhs_dilate={}", rhs.join("x")).ok();
        }
        (t, out, elems)
    }

    pub(super) fn reduce_window(&mut self) -> Option<()> {
        let v = self.pick(|v| !v.dims.is_empty() && v.elem != Elem::Pred)?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        let (window, out, elems) = self.window(&dims, true);
        let (comp, op, init) = self.reducer(elem, true);
        let ini = self.push(elem, vec![], format!("constant({init})"), true, 1.0);
        let iname = self.vals[ini].name.clone();
        let nb = if op == "add" { bound * elems as f64 } else { bound };
        self.push(
            elem,
            out,
            format!("reduce-window({name}, {iname}), window={{{window}}}, to_apply={comp}"),
            exact,
            nb,
        );
        Some(())
    }

    pub(super) fn select_and_scatter(&mut self) -> Option<()> {
        let v = self
            .pick(|v| !v.dims.is_empty() && v.dims.len() <= 2 && v.exact && v.elem != Elem::Pred)?;
        let Val { name, elem, dims, .. } = self.vals[v].clone();
        let (window, out, elems) = self.window(&dims, false);
        let src = self.need(elem, &out);
        let vs = self.vals[src].clone();
        let ini = self.push(elem, vec![], "constant(0)".into(), true, 0.0);
        let iname = self.vals[ini].name.clone();
        let t = shape(elem, &[]);
        let dir = *self.rng.pick(&["GE", "GT", "LE"]);
        let sel = self.fresh("select");
        self.helpers.push(format!(
            "{sel} {{\n  a = {t} parameter(0)\n  b = {t} parameter(1)\n  ROOT r = pred[] compare(a, b), direction={dir}\n}}\n"
        ));
        let add = self.binary_comp("add", elem);
        self.push(
            elem,
            dims,
            format!(
                "select-and-scatter({name}, {}, {iname}), window={{{window}}}, select={sel}, scatter={add}",
                vs.name
            ),
            vs.exact,
            vs.bound * elems as f64,
        );
        Some(())
    }

    /// A scalar s32 index: a constant around the dim's range (out of bounds too), or an
    /// exact integer value of the program.
    pub(super) fn index(&mut self, d: u64) -> String {
        if self.rng.chance(1, 3)
            && let Some(v) = self.pick(|v| v.dims.is_empty() && v.elem == Elem::S32 && v.exact)
        {
            return self.vals[v].name.clone();
        }
        let i = self.rng.range(-1, d as i64 + 1);
        let c =
            self.push(Elem::S32, vec![], format!("constant({i})"), true, i.unsigned_abs() as f64);
        self.vals[c].name.clone()
    }

    pub(super) fn dynamic_slice(&mut self) -> Option<()> {
        let v = self.pick(|v| !v.dims.is_empty())?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        let sizes: Vec<u64> = dims.iter().map(|&d| 1 + self.rng.below(d as usize) as u64).collect();
        let idx: Vec<String> = dims.iter().map(|&d| self.index(d)).collect();
        if self.rng.chance(1, 2) {
            let u = self.need(elem, &sizes);
            let vu = self.vals[u].clone();
            self.push(
                elem,
                dims,
                format!("dynamic-update-slice({name}, {}, {})", vu.name, idx.join(", ")),
                exact && vu.exact,
                bound.max(vu.bound),
            );
        } else {
            self.push(
                elem,
                sizes.clone(),
                format!(
                    "dynamic-slice({name}, {}), dynamic_slice_sizes={{{}}}",
                    idx.join(", "),
                    list(&sizes)
                ),
                exact,
                bound,
            );
        }
        Some(())
    }

    /// Indices `s32[n, k]`: a value of the program or a new parameter (small integers,
    /// out of bounds sometimes).
    pub(super) fn indices(&mut self, n: u64, k: u64) -> Option<String> {
        let i = self.need(Elem::S32, &[n, k]);
        self.vals[i].exact.then(|| self.vals[i].name.clone())
    }

    pub(super) fn gather(&mut self) -> Option<()> {
        let v = self.pick(|v| !v.dims.is_empty())?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        let r = dims.len();
        let k = if r >= 2 && self.rng.chance(1, 3) { 2 } else { 1 };
        let mapped: Vec<usize> = self.rng.permutation(r)[..k].to_vec();
        let n = self.rng.range(1, 4) as u64;
        let idx = self.indices(n, k as u64)?;
        let mut collapsed = Vec::new();
        let mut sizes = Vec::new();
        let mut out = vec![n];
        for (d, &dd) in dims.iter().enumerate() {
            if mapped.contains(&d) && self.rng.chance(2, 3) {
                collapsed.push(d as u64);
                sizes.push(1);
            } else {
                let s = 1 + self.rng.below(dd as usize) as u64;
                sizes.push(s);
                out.push(s);
            }
        }
        let offset: Vec<u64> = (1..out.len() as u64).collect();
        let map: Vec<u64> = mapped.iter().map(|&d| d as u64).collect();
        self.push(
            elem,
            out,
            format!(
                "gather({name}, {idx}), offset_dims={{{}}}, collapsed_slice_dims={{{}}}, start_index_map={{{}}}, index_vector_dim=1, slice_sizes={{{}}}",
                list(&offset),
                list(&collapsed),
                list(&map),
                list(&sizes)
            ),
            exact,
            bound,
        );
        Some(())
    }

    pub(super) fn scatter(&mut self) -> Option<()> {
        let v = self.pick(|v| !v.dims.is_empty() && v.elem != Elem::Pred)?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        let r = dims.len();
        let kdim = self.rng.below(r);
        let n = self.rng.range(1, 3) as u64;
        let idx = self.indices(n, 1)?;
        let inserted = self.rng.chance(1, 2);
        let mut window = Vec::new();
        for (d, &dd) in dims.iter().enumerate() {
            if d == kdim && inserted {
                continue;
            }
            window.push(1 + self.rng.below(dd as usize) as u64);
        }
        let mut upd_dims = vec![n];
        upd_dims.extend(&window);
        let u = self.need(elem, &upd_dims);
        let vu = self.vals[u].clone();
        let uw: Vec<u64> = (1..upd_dims.len() as u64).collect();
        let ins = if inserted { kdim.to_string() } else { String::new() };
        // Overwriting is order-dependent when two updates meet: only with one index.
        let (op, nb) = if n == 1 && self.rng.chance(1, 3) {
            ("assign", bound.max(vu.bound))
        } else if self.rng.chance(2, 3) {
            ("add", bound + n as f64 * vu.bound)
        } else {
            ("maximum", bound.max(vu.bound))
        };
        let comp = if op == "assign" {
            let name = self.fresh("assign");
            let t = shape(elem, &[]);
            self.helpers.push(format!(
                "{name} {{\n  a = {t} parameter(0)\n  ROOT b = {t} parameter(1)\n}}\n"
            ));
            name
        } else {
            self.binary_comp(op, elem)
        };
        self.push(
            elem,
            dims,
            format!(
                "scatter({name}, {idx}, {}), update_window_dims={{{}}}, inserted_window_dims={{{ins}}}, scatter_dims_to_operand_dims={{{kdim}}}, index_vector_dim=1, to_apply={comp}",
                vu.name,
                list(&uw)
            ),
            exact && vu.exact,
            nb,
        );
        Some(())
    }

    pub(super) fn sort(&mut self) -> Option<()> {
        // With edge values a float key may be NaN, whose sign (which a total order sorts
        // by) XLA does not define.
        let edge = self.cfg.edge_values;
        let v = self.pick(|v| {
            !v.dims.is_empty() && v.exact && v.elem != Elem::Pred && !(edge && v.elem.is_float())
        })?;
        let Val { name, elem, dims, bound, .. } = self.vals[v].clone();
        let d = self.rng.below(dims.len());
        let t = shape(elem, &[]);
        let dir = *self.rng.pick(&["LT", "GT"]);
        let ty = if elem.is_float() { ", type=TOTALORDER" } else { "" };
        let cmp = self.fresh("compare");
        let with_values = self.rng.chance(1, 2);
        let extra =
            if with_values { "\n  c = s32[] parameter(2)\n  d = s32[] parameter(3)" } else { "" };
        self.helpers.push(format!(
            "{cmp} {{\n  a = {t} parameter(0)\n  b = {t} parameter(1){extra}\n  ROOT r = pred[] compare(a, b), direction={dir}{ty}\n}}\n"
        ));
        if !with_values {
            self.push(
                elem,
                dims,
                format!("sort({name}), dimensions={{{d}}}, is_stable=true, to_apply={cmp}"),
                true,
                bound,
            );
            return Some(());
        }
        let io = self.push(
            Elem::S32,
            dims.clone(),
            format!("iota(), iota_dimension={d}"),
            true,
            dims[d] as f64,
        );
        let iname = self.vals[io].name.clone();
        let ty = format!("({}, {})", shape(elem, &dims), shape(Elem::S32, &dims));
        let s = self.push_tuple(
            ty,
            format!("sort({name}, {iname}), dimensions={{{d}}}, is_stable=true, to_apply={cmp}"),
        );
        let k = self.rng.below(2);
        let (e, b) = if k == 0 { (elem, bound) } else { (Elem::S32, dims[d] as f64) };
        self.push(e, dims, format!("get-tuple-element({s}), index={k}"), true, b);
        Some(())
    }

    pub(super) fn argmax(&mut self) -> Option<()> {
        let v = self.pick(|v| !v.dims.is_empty() && v.exact && v.elem != Elem::Pred)?;
        let Val { name, elem, dims, bound, .. } = self.vals[v].clone();
        let d = self.rng.below(dims.len());
        let t = shape(elem, &[]);
        let comp = self.fresh("argmax");
        let dir = *self.rng.pick(&["GT", "LT"]);
        self.helpers.push(format!(
            "{comp} {{\n  a = {t} parameter(0)\n  ai = s32[] parameter(1)\n  b = {t} parameter(2)\n  bi = s32[] parameter(3)\n  \
             better = pred[] compare(a, b), direction={dir}\n  same = pred[] compare(a, b), direction=EQ\n  \
             first = pred[] compare(ai, bi), direction=LT\n  tie = pred[] and(same, first)\n  keep = pred[] or(better, tie)\n  \
             v = {t} select(keep, a, b)\n  i = s32[] select(keep, ai, bi)\n  ROOT r = ({t}, s32[]) tuple(v, i)\n}}\n"
        ));
        let io = self.push(
            Elem::S32,
            dims.clone(),
            format!("iota(), iota_dimension={d}"),
            true,
            dims[d] as f64,
        );
        let init = if dir == "GT" { lowest(elem) } else { highest(elem) };
        let c0 = self.push(elem, vec![], format!("constant({init})"), true, bound);
        let c1 = self.push(Elem::S32, vec![], "constant(0)".into(), true, 0.0);
        let out: Vec<u64> = (0..dims.len()).filter(|&i| i != d).map(|i| dims[i]).collect();
        let names: Vec<String> = [io, c0, c1].iter().map(|&i| self.vals[i].name.clone()).collect();
        let ty = format!("({}, {})", shape(elem, &out), shape(Elem::S32, &out));
        let r = self.push_tuple(
            ty,
            format!(
                "reduce({name}, {}, {}, {}), dimensions={{{d}}}, to_apply={comp}",
                names[0], names[1], names[2]
            ),
        );
        let k = self.rng.below(2);
        let (e, b) = if k == 0 { (elem, bound) } else { (Elem::S32, dims[d] as f64) };
        self.push(e, out, format!("get-tuple-element({r}), index={k}"), true, b);
        Some(())
    }

    pub(super) fn while_loop(&mut self) -> Option<()> {
        let v = self.pick(|v| v.elem != Elem::Pred)?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        let trips = self.rng.range(0, 3);
        let t = shape(elem, &dims);
        // Sometimes a second slot of the same element count, swapped with the first
        // through reshapes every iteration.
        let swap = dims.len() >= 2 && dims[0] != dims[dims.len() - 1] && self.rng.chance(1, 2);
        let mut other = dims.clone();
        other.reverse();
        let t2 = shape(elem, &other);
        let (body, cond) = (self.fresh("body"), self.fresh("cond"));
        let state = if swap { format!("(s32[], {t}, {t2})") } else { format!("(s32[], {t})") };
        let step = self.binary_comp(if elem.is_float() { "add" } else { "xor" }, elem);
        let mut b = format!(
            "{body} {{\n  s = {state} parameter(0)\n  i = s32[] get-tuple-element(s), index=0\n  one = s32[] constant(1)\n  \
             next = s32[] add(i, one)\n  x = {t} get-tuple-element(s), index=1\n  c = {} constant(1)\n  cb = {t} broadcast(c), dimensions={{}}\n  \
             y = {t} map(x, cb), dimensions={{{}}}, to_apply={step}\n",
            shape(elem, &[]),
            list(&(0..dims.len() as u64).collect::<Vec<_>>())
        );
        if swap {
            b.push_str(&format!(
                "  z = {t2} get-tuple-element(s), index=2\n  zr = {t} reshape(z)\n  yr = {t2} reshape(y)\n  ROOT r = {state} tuple(next, zr, yr)\n}}\n"
            ));
        } else {
            b.push_str(&format!("  ROOT r = {state} tuple(next, y)\n}}\n"));
        }
        self.helpers.push(b);
        self.helpers.push(format!(
            "{cond} {{\n  s = {state} parameter(0)\n  i = s32[] get-tuple-element(s), index=0\n  n = s32[] constant({trips})\n  \
             ROOT lt = pred[] compare(i, n), direction=LT\n}}\n"
        ));
        let zero = self.push(Elem::S32, vec![], "constant(0)".into(), true, 0.0);
        let zn = self.vals[zero].name.clone();
        let (init, ex2, b2) = if swap {
            let w = self.need(elem, &other);
            let vw = self.vals[w].clone();
            (format!("tuple({zn}, {name}, {})", vw.name), vw.exact, vw.bound)
        } else {
            (format!("tuple({zn}, {name})"), true, 0.0)
        };
        let ti = self.push_tuple(state.clone(), init);
        let w = self.push_tuple(state, format!("while({ti}), condition={cond}, body={body}"));
        let k = if swap { 1 + self.rng.below(2) } else { 1 };
        let out = if k == 2 { other } else { dims };
        let nb = bound.max(b2) + trips as f64 + 1.0;
        self.push(elem, out, format!("get-tuple-element({w}), index={k}"), exact && ex2, nb);
        Some(())
    }

    pub(super) fn conditional(&mut self) -> Option<()> {
        let v = self.pick(|v| v.elem != Elem::Pred)?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        let t = shape(elem, &dims);
        let branches = 1 + self.rng.below(3);
        let ops = ["negate", "abs", "copy"];
        let mut names = Vec::new();
        for k in 0..branches {
            let op = if elem.is_signed() || elem.is_float() { ops[k % 3] } else { "copy" };
            let b = self.fresh("branch");
            self.helpers
                .push(format!("{b} {{\n  x = {t} parameter(0)\n  ROOT y = {t} {op}(x)\n}}\n"));
            names.push(b);
        }
        let sel = self.index(branches as u64);
        let args = vec![name.clone(); branches];
        self.push(
            elem,
            dims,
            format!(
                "conditional({sel}, {}), branch_computations={{{}}}",
                args.join(", "),
                names.join(", ")
            ),
            exact,
            bound + 1.0,
        );
        Some(())
    }

    pub(super) fn map(&mut self) -> Option<()> {
        let a = self.pick(|v| v.elem != Elem::Pred)?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[a].clone();
        let b = self.need(elem, &dims);
        let vb = self.vals[b].clone();
        let t = shape(elem, &[]);
        let comp = self.fresh("mapped");
        self.helpers.push(format!(
            "{comp} {{\n  a = {t} parameter(0)\n  b = {t} parameter(1)\n  m = {t} maximum(a, b)\n  ROOT r = {t} add(m, a)\n}}\n"
        ));
        let all: Vec<u64> = (0..dims.len() as u64).collect();
        self.push(
            elem,
            dims,
            format!("map({name}, {}), dimensions={{{}}}, to_apply={comp}", vb.name, list(&all)),
            exact && vb.exact,
            2.0 * bound.max(vb.bound),
        );
        Some(())
    }

    pub(super) fn convolution(&mut self) -> Option<()> {
        let v = self.pick(|v| v.dims.len() == 3 && v.elem != Elem::Pred)?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        // lhs [batch, spatial, feature] (b0f), rhs [spatial, in, out] (0io).
        let (batch, w, c) = (dims[0], dims[1], dims[2]);
        let groups = if c % 2 == 0 && self.rng.chance(1, 4) { 2 } else { 1 };
        let (window, out_sp, k) = self.window(&[w], true);
        let o = groups * self.rng.range(1, 3) as u64;
        let kdims = vec![k, c / groups, o];
        let r = self.need(elem, &kdims);
        let vr = self.vals[r].clone();
        let nb = bound * vr.bound * (k * c) as f64;
        let g = if groups > 1 { format!(", feature_group_count={groups}") } else { String::new() };
        self.push(
            elem,
            vec![batch, out_sp[0], o],
            format!(
                "convolution({name}, {}), window={{{window}}}, dim_labels=b0f_0io->b0f{g}",
                vr.name
            ),
            exact && vr.exact,
            nb,
        );
        Some(())
    }

    pub(super) fn is_finite_or_reduce_precision(&mut self) -> Option<()> {
        let v = self.pick(|v| v.elem.is_float() && v.exact)?;
        let Val { name, elem, dims, bound, .. } = self.vals[v].clone();
        if self.rng.chance(1, 2) {
            self.push(Elem::Pred, dims, format!("is-finite({name})"), true, 1.0);
        } else {
            let (e, m) = *self.rng.pick(&[(5u32, 10u32), (8, 7), (4, 3), (5, 2), (8, 23)]);
            self.push(
                elem,
                dims,
                format!("reduce-precision({name}), exponent_bits={e}, mantissa_bits={m}"),
                true,
                2.0 * bound,
            );
        }
        Some(())
    }

    /// A scan as JAX writes `lax.scan`: a counted loop reading row `i` of `xs` with a
    /// dynamic-slice and writing row `i` of the result with a dynamic-update-slice.
    pub(super) fn scan(&mut self) -> Option<()> {
        let v = self.pick(|v| v.dims.len() == 2 && v.elem.is_float())?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        let (t, row) = (shape(elem, &dims), shape(elem, &[1, dims[1]]));
        let state = format!("(s32[], {t}, {t})");
        let (body, cond) = (self.fresh("scan_body"), self.fresh("scan_cond"));
        let op = *self.rng.pick(&["negate", "abs", "tanh", "floor"]);
        self.helpers.push(format!(
            "{body} {{\n  s = {state} parameter(0)\n  i = s32[] get-tuple-element(s), index=0\n  xs = {t} get-tuple-element(s), index=1\n  \
             acc = {t} get-tuple-element(s), index=2\n  z = s32[] constant(0)\n  x = {row} dynamic-slice(xs, i, z), dynamic_slice_sizes={{1,{}}}\n  \
             y = {row} {op}(x)\n  acc2 = {t} dynamic-update-slice(acc, y, i, z)\n  one = s32[] constant(1)\n  next = s32[] add(i, one)\n  \
             ROOT r = {state} tuple(next, xs, acc2)\n}}\n",
            dims[1]
        ));
        self.helpers.push(format!(
            "{cond} {{\n  s = {state} parameter(0)\n  i = s32[] get-tuple-element(s), index=0\n  n = s32[] constant({})\n  \
             ROOT lt = pred[] compare(i, n), direction=LT\n}}\n",
            dims[0]
        ));
        let zero = self.push(Elem::S32, vec![], "constant(0)".into(), true, 0.0);
        let c = self.constant(elem);
        let (zn, cn) = (self.vals[zero].name.clone(), self.vals[c].name.clone());
        let acc =
            self.push(elem, dims.clone(), format!("broadcast({cn}), dimensions={{}}"), true, 3.0);
        let an = self.vals[acc].name.clone();
        let ti = self.push_tuple(state.clone(), format!("tuple({zn}, {name}, {an})"));
        let w = self.push_tuple(state, format!("while({ti}), condition={cond}, body={body}"));
        let keeps = matches!(op, "negate" | "abs") || op == "floor" && exact;
        self.push(
            elem,
            dims,
            format!("get-tuple-element({w}), index=2"),
            exact && keeps,
            bound.max(3.0),
        );
        Some(())
    }

    pub(super) fn topk(&mut self) -> Option<()> {
        if self.cfg.edge_values {
            return None; // NaN keys: see `sort`.
        }
        let v = self
            .pick(|v| !v.dims.is_empty() && v.dims.len() <= 2 && v.exact && v.elem == Elem::F32)?;
        let Val { name, elem, dims, bound, .. } = self.vals[v].clone();
        let last = dims.len() - 1;
        let k = 1 + self.rng.below(dims[last] as usize) as u64;
        let mut out = dims.clone();
        out[last] = k;
        let ty = format!("({}, {})", shape(elem, &out), shape(Elem::S32, &out));
        let t = self.push_tuple(ty, format!("topk({name}), k={k}, largest=true"));
        let i = self.rng.below(2);
        let (e, b) = if i == 0 { (elem, bound) } else { (Elem::S32, dims[last] as f64) };
        self.push(e, out, format!("get-tuple-element({t}), index={i}"), true, b);
        Some(())
    }

    pub(super) fn conditional_on_pred(&mut self) -> Option<()> {
        let p = self.pick(|v| v.dims.is_empty() && v.elem == Elem::Pred)?;
        let x = self.pick(|v| v.elem.is_float() || v.elem.is_signed())?;
        let (pn, Val { name, elem, dims, exact, bound, .. }) =
            (self.vals[p].name.clone(), self.vals[x].clone());
        let y = self.need(elem, &dims);
        let vy = self.vals[y].clone();
        let t = shape(elem, &dims);
        let state = format!("({t}, {t})");
        let (tb, fb) = (self.fresh("on_true"), self.fresh("on_false"));
        self.helpers.push(format!(
            "{tb} {{\n  s = {state} parameter(0)\n  a = {t} get-tuple-element(s), index=0\n  b = {t} get-tuple-element(s), index=1\n  ROOT r = {t} subtract(a, b)\n}}\n"
        ));
        self.helpers.push(format!(
            "{fb} {{\n  s = {state} parameter(0)\n  a = {t} get-tuple-element(s), index=0\n  ROOT r = {t} negate(a)\n}}\n"
        ));
        let tup = self.push_tuple(state, format!("tuple({name}, {})", vy.name));
        self.push(
            elem,
            dims,
            format!(
                "conditional({pn}, {tup}, {tup}), true_computation={tb}, false_computation={fb}"
            ),
            exact && vy.exact,
            bound + vy.bound,
        );
        Some(())
    }
}
