//! Temporary reference dot (replaced by the GEMM-backed kernel).
use hlo_ir::op::DotDims;

pub fn dot_general_f32(lhs: &[f32], ld: &[usize], rhs: &[f32], rd: &[usize], dn: &DotDims, out: &mut [f32]) {
    let lb: Vec<usize> = dn.lhs_batch.iter().map(|&d| d as usize).collect();
    let rb: Vec<usize> = dn.rhs_batch.iter().map(|&d| d as usize).collect();
    let lc: Vec<usize> = dn.lhs_contracting.iter().map(|&d| d as usize).collect();
    let rc: Vec<usize> = dn.rhs_contracting.iter().map(|&d| d as usize).collect();
    let lf: Vec<usize> = (0..ld.len()).filter(|d| !lb.contains(d) && !lc.contains(d)).collect();
    let rf: Vec<usize> = (0..rd.len()).filter(|d| !rb.contains(d) && !rc.contains(d)).collect();
    let strides = |d: &[usize]| { let mut s = vec![1usize; d.len()]; for i in (0..d.len().saturating_sub(1)).rev() { s[i] = s[i + 1] * d[i + 1]; } s };
    let (ls, rs) = (strides(ld), strides(rd));
    let bdims: Vec<usize> = lb.iter().map(|&d| ld[d]).collect();
    let cdims: Vec<usize> = lc.iter().map(|&d| ld[d]).collect();
    let lfd: Vec<usize> = lf.iter().map(|&d| ld[d]).collect();
    let rfd: Vec<usize> = rf.iter().map(|&d| rd[d]).collect();
    let count = |d: &[usize]| d.iter().product::<usize>();
    let unravel = |mut i: usize, d: &[usize]| { let mut v = vec![0; d.len()]; for k in (0..d.len()).rev() { v[k] = i % d[k]; i /= d[k]; } v };
    let mut o = 0;
    for b in 0..count(&bdims) {
        let bi = unravel(b, &bdims);
        for i in 0..count(&lfd) {
            let ii = unravel(i, &lfd);
            for j in 0..count(&rfd) {
                let jj = unravel(j, &rfd);
                let mut lo = 0; let mut ro = 0;
                for (k, &d) in lb.iter().enumerate() { lo += bi[k] * ls[d]; }
                for (k, &d) in rb.iter().enumerate() { ro += bi[k] * rs[d]; }
                for (k, &d) in lf.iter().enumerate() { lo += ii[k] * ls[d]; }
                for (k, &d) in rf.iter().enumerate() { ro += jj[k] * rs[d]; }
                let mut acc = 0f32;
                for c in 0..count(&cdims) {
                    let ci = unravel(c, &cdims);
                    let (mut l2, mut r2) = (lo, ro);
                    for (k, &d) in lc.iter().enumerate() { l2 += ci[k] * ls[d]; }
                    for (k, &d) in rc.iter().enumerate() { r2 += ci[k] * rs[d]; }
                    acc += lhs[l2] * rhs[r2];
                }
                out[o] = acc;
                o += 1;
            }
        }
    }
}
