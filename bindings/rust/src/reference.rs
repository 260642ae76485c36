//! The library's CPU references (`tk_ref_*`) on host slices, packed
//! row-major, and the fp16 conversions. Lengths are checked before the call.
use crate::error::{Error, Result};
use crate::sys;

/// IEEE binary16 bits to f32.
pub fn f16_to_f32(h: u16) -> f32 {
    unsafe { sys::tk_f16_to_f32(h) }
}
/// f32 to IEEE binary16 bits, round to nearest even.
pub fn f32_to_f16(f: f32) -> u16 {
    unsafe { sys::tk_f32_to_f16(f) }
}

fn len(what: &str, got: usize, a: usize, b: usize) -> Result<()> {
    let want = a.checked_mul(b).ok_or_else(|| Error::Overflow(format!("{}: {} x {} overflows", what, a, b)))?;
    if got != want {
        return Err(Error::invalid(format!("{}: {} elements, expected {}", what, got, want)));
    }
    Ok(())
}

fn i(v: usize) -> i64 {
    v.min(i64::MAX as usize) as i64
}

fn st(s: sys::tk_status, what: &str) -> Result<()> {
    if s == sys::TK_OK {
        Ok(())
    } else {
        Err(Error::from_status(s, format!("{}: the reference refused the arguments", what)))
    }
}

/// `C[M,N] = A[M,K] x B[K,N]`, fp32 result.
pub fn gemm_f16_fwd(m: usize, n: usize, k: usize, a: &[u16], b: &[u16]) -> Result<Vec<f32>> {
    len("A", a.len(), m, k)?;
    len("B", b.len(), k, n)?;
    let mut c = vec![0f32; m * n];
    st(unsafe { sys::tk_ref_gemm_f16_fwd(i(m), i(n), i(k), a.as_ptr(), b.as_ptr(), c.as_mut_ptr()) }, "gemm_f16_fwd")?;
    Ok(c)
}

/// `grad_A[M,K] = grad_C[M,N] x B^T`.
pub fn gemm_f16_grad_a(m: usize, n: usize, k: usize, grad_c: &[u16], b: &[u16]) -> Result<Vec<u16>> {
    len("grad_C", grad_c.len(), m, n)?;
    len("B", b.len(), k, n)?;
    let mut out = vec![0u16; m * k];
    st(unsafe { sys::tk_ref_gemm_f16_grad_a(i(m), i(n), i(k), grad_c.as_ptr(), b.as_ptr(), out.as_mut_ptr()) },
       "gemm_f16_grad_a")?;
    Ok(out)
}

/// `grad_B[K,N] = A^T x grad_C`.
pub fn gemm_f16_grad_b(m: usize, n: usize, k: usize, a: &[u16], grad_c: &[u16]) -> Result<Vec<u16>> {
    len("A", a.len(), m, k)?;
    len("grad_C", grad_c.len(), m, n)?;
    let mut out = vec![0u16; k * n];
    st(unsafe { sys::tk_ref_gemm_f16_grad_b(i(m), i(n), i(k), a.as_ptr(), grad_c.as_ptr(), out.as_mut_ptr()) },
       "gemm_f16_grad_b")?;
    Ok(out)
}

pub fn softmax_f16_fwd(rows: usize, cols: usize, input: &[u16]) -> Result<Vec<u16>> {
    len("in", input.len(), rows, cols)?;
    let mut out = vec![0u16; rows * cols];
    st(unsafe { sys::tk_ref_softmax_f16_fwd(i(rows), i(cols), input.as_ptr(), out.as_mut_ptr()) }, "softmax_f16_fwd")?;
    Ok(out)
}

pub fn softmax_xent_f16_bwd(rows: usize, cols: usize, s: &[u16], g: &[u16]) -> Result<Vec<u16>> {
    len("s", s.len(), rows, cols)?;
    len("g", g.len(), rows, cols)?;
    let mut out = vec![0u16; rows * cols];
    st(unsafe { sys::tk_ref_softmax_xent_f16_bwd(i(rows), i(cols), s.as_ptr(), g.as_ptr(), out.as_mut_ptr()) },
       "softmax_xent_f16_bwd")?;
    Ok(out)
}

/// (`out[Q,D]`, number of out-of-range indices).
pub fn embedding_f16_fwd(v: usize, d: usize, weight: &[u16], idx: &[i32]) -> Result<(Vec<u16>, u64)> {
    len("weight", weight.len(), v, d)?;
    let q = idx.len();
    let mut out = vec![0u16; q * d];
    let mut bad = 0u64;
    st(unsafe { sys::tk_ref_embedding_f16_fwd(i(v), i(d), weight.as_ptr(), i(q), idx.as_ptr(), out.as_mut_ptr(), &mut bad) },
       "embedding_f16_fwd")?;
    Ok((out, bad))
}

/// `grad_weight[idx[q],:] += grad_out[q,:]` in place; the number of
/// out-of-range indices.
pub fn embedding_f16_bwd(v: usize, d: usize, grad_weight: &mut [u16], idx: &[i32], grad_out: &[u16]) -> Result<u64> {
    len("grad_weight", grad_weight.len(), v, d)?;
    len("grad_out", grad_out.len(), idx.len(), d)?;
    let mut bad = 0u64;
    st(unsafe {
        sys::tk_ref_embedding_f16_bwd(i(v), i(d), grad_weight.as_mut_ptr(), i(idx.len()), idx.as_ptr(), grad_out.as_ptr(),
                                      &mut bad)
    }, "embedding_f16_bwd")?;
    Ok(bad)
}
