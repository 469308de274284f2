//! The encoder's arithmetic: `x · Wᵀ` over weights dequantised a panel of
//! rows at a time (never the whole matrix), LayerNorm, BERT's exact GELU and
//! one sequence's softmax attention.
//!
//! Owns: the only calls into `matrixmultiply` (its `sgemm` is an `unsafe fn`
//! over raw pointers; each call's bounds are checked in front of it). Must
//! never: read past a buffer (every pointer and stride is derived from a slice
//! whose length is asserted), allocate per panel (a thread's panel buffer is
//! reused), or know where weights come from (a row reader is passed in).

use std::cell::RefCell;

use rayon::prelude::*;

/// Rows of a weight matrix dequantised at once: 64 × 1536 floats (384 KB)
/// at most, inside L2.
const PANEL: usize = 64;

thread_local! {
    static PANEL_BUF: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// `c (m × n) = a (m × k, rows of k) · bᵀ (b: n × k)`, row strides given:
/// `a[i][j]` at `a[i * lda + j]`, `b[p][j]` at `b[p * k + j]`, `c[i][q]` at
/// `c[i * ldc + q]`.
#[allow(unsafe_code)]
#[allow(clippy::too_many_arguments)]
fn sgemm_abt(
    m: usize,
    k: usize,
    n: usize,
    alpha: f32,
    a: &[f32],
    lda: usize,
    b: &[f32],
    ldb: usize,
    c: &mut [f32],
    ldc: usize,
) {
    if m == 0 || n == 0 {
        return;
    }
    assert!(k <= lda && k <= ldb && n <= ldc);
    assert!(a.len() >= (m - 1) * lda + k, "a is too short");
    assert!(b.len() >= (n - 1) * ldb + k, "b is too short");
    assert!(c.len() >= (m - 1) * ldc + n, "c is too short");
    // SAFETY: the asserts above keep every element sgemm touches,
    // a[i*lda + j] (i < m, j < k), b[p*ldb + j] (p < n, j < k) and
    // c[i*ldc + q] (i < m, q < n), inside its slice; c is borrowed mutably,
    // so it aliases neither a nor b.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            alpha,
            a.as_ptr(),
            lda as isize,
            1,
            b.as_ptr(),
            1,
            ldb as isize,
            0.0,
            c.as_mut_ptr(),
            ldc as isize,
            1,
        );
    }
}

/// `c (m × n) = a (m × k) · bᵀ (b: n × k)` with `c[i][q]` at
/// `c[i * ldc + q]` and `b[p][j]` at `b[p * ldb + j]`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul_abt(
    m: usize,
    k: usize,
    n: usize,
    alpha: f32,
    a: &[f32],
    lda: usize,
    b: &[f32],
    ldb: usize,
    c: &mut [f32],
    ldc: usize,
) {
    sgemm_abt(m, k, n, alpha, a, lda, b, ldb, c, ldc);
}

/// `c (m × n) = a (m × k) · b (k × n)`, both with row strides: used for
/// attention's `P · V`, whose `V` is a column block of a wider matrix.
#[allow(unsafe_code)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul_ab(
    m: usize,
    k: usize,
    n: usize,
    a: &[f32],
    lda: usize,
    b: &[f32],
    ldb: usize,
    c: &mut [f32],
    ldc: usize,
) {
    if m == 0 || n == 0 || k == 0 {
        return;
    }
    assert!(k <= lda && n <= ldb && n <= ldc);
    assert!(a.len() >= (m - 1) * lda + k, "a is too short");
    assert!(b.len() >= (k - 1) * ldb + n, "b is too short");
    assert!(c.len() >= (m - 1) * ldc + n, "c is too short");
    // SAFETY: as in sgemm_abt, the asserts keep a[i*lda + j] (i < m, j < k),
    // b[j*ldb + q] (j < k, q < n) and c[i*ldc + q] inside their slices, and c
    // is a unique borrow.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a.as_ptr(),
            lda as isize,
            1,
            b.as_ptr(),
            ldb as isize,
            1,
            0.0,
            c.as_mut_ptr(),
            ldc as isize,
            1,
        );
    }
}

/// `out (m × n) = x (m × k) · Wᵀ + bias`, `W` being `n` rows of `k` that
/// `row(r, buf)` writes (dequantised) into `buf`. With `parallel`, panels of
/// rows go to rayon's threads (for one short text); without, the caller is
/// already parallel over texts.
#[allow(clippy::too_many_arguments)]
pub(crate) fn linear<R>(
    x: &[f32],
    m: usize,
    k: usize,
    n: usize,
    row: R,
    bias: &[f32],
    out: &mut [f32],
    parallel: bool,
) where
    R: Fn(usize, &mut [f32]) + Sync,
{
    assert_eq!(x.len(), m * k);
    assert_eq!(out.len(), m * n);
    assert_eq!(bias.len(), n);
    let panels = n.div_ceil(PANEL);
    let fill = |p: usize, buf: &mut Vec<f32>| -> usize {
        let r0 = p * PANEL;
        let rows = PANEL.min(n - r0);
        buf.resize(rows * k, 0.0);
        for (r, chunk) in buf.chunks_exact_mut(k).enumerate() {
            row(r0 + r, chunk);
        }
        rows
    };
    if parallel && panels > 1 && rayon::current_num_threads() > 1 {
        let parts: Vec<(usize, Vec<f32>)> = (0..panels)
            .into_par_iter()
            .map(|p| {
                PANEL_BUF.with(|cell| {
                    let mut buf = cell.borrow_mut();
                    let rows = fill(p, &mut buf);
                    let mut part = vec![0.0; m * rows];
                    sgemm_abt(m, k, rows, 1.0, x, k, &buf, k, &mut part, rows);
                    (rows, part)
                })
            })
            .collect();
        for (p, (rows, part)) in parts.iter().enumerate() {
            let c0 = p * PANEL;
            for i in 0..m {
                out[i * n + c0..i * n + c0 + rows].copy_from_slice(&part[i * rows..(i + 1) * rows]);
            }
        }
    } else {
        PANEL_BUF.with(|cell| {
            let mut buf = cell.borrow_mut();
            for p in 0..panels {
                let rows = fill(p, &mut buf);
                let c0 = p * PANEL;
                sgemm_abt(m, k, rows, 1.0, x, k, &buf, k, &mut out[c0..], n);
            }
        });
    }
    for row in out.chunks_exact_mut(n) {
        for (o, b) in row.iter_mut().zip(bias) {
            *o += b;
        }
    }
}

/// LayerNorm over each row of `x` (rows of `gamma.len()`), in place.
pub(crate) fn layer_norm(x: &mut [f32], gamma: &[f32], beta: &[f32], eps: f32) {
    let h = gamma.len();
    for row in x.chunks_exact_mut(h) {
        let mean = row.iter().sum::<f32>() / h as f32;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / h as f32;
        let inv = 1.0 / (var + eps).sqrt();
        for ((v, g), b) in row.iter_mut().zip(gamma).zip(beta) {
            *v = (*v - mean) * inv * g + b;
        }
    }
}

/// The error function, Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7, below
/// float32's resolution near 1): what models/distill.py computes.
fn erf(x: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let y = 1.0
        - (((((1.061_405_4 * t - 1.453_152_1) * t) + 1.421_413_8) * t - 0.284_496_74) * t
            + 0.254_829_6)
            * t
            * (-a * a).exp();
    y.copysign(x)
}

/// BERT's exact GELU, `x Φ(x)`, in place.
pub(crate) fn gelu(x: &mut [f32]) {
    for v in x {
        *v = 0.5 * *v * (1.0 + erf(*v * std::f32::consts::FRAC_1_SQRT_2));
    }
}

/// Softmax of each row of `s` (rows of `len`), in place.
pub(crate) fn softmax_rows(s: &mut [f32], len: usize) {
    for row in s.chunks_exact_mut(len) {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0.0;
        for v in row.iter_mut() {
            *v = (*v - max).exp();
            sum += *v;
        }
        let inv = 1.0 / sum;
        row.iter_mut().for_each(|v| *v *= inv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_matches_a_plain_loop_in_both_modes() {
        let (m, k, n) = (5, 7, 130);
        let x: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
        let w: Vec<f32> = (0..n * k).map(|i| (i as f32 * 0.11).cos()).collect();
        let bias: Vec<f32> = (0..n).map(|i| i as f32 * 0.01).collect();
        let mut want = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                want[i * n + j] =
                    (0..k).map(|t| x[i * k + t] * w[j * k + t]).sum::<f32>() + bias[j];
            }
        }
        for parallel in [false, true] {
            let mut out = vec![0.0; m * n];
            let row = |r: usize, buf: &mut [f32]| buf.copy_from_slice(&w[r * k..(r + 1) * k]);
            linear(&x, m, k, n, row, &bias, &mut out, parallel);
            for (a, b) in out.iter().zip(&want) {
                assert!((a - b).abs() < 1e-4, "{a} vs {b} (parallel {parallel})");
            }
        }
    }

    #[test]
    fn erf_is_accurate() {
        for (x, want) in [
            (0.0, 0.0),
            (0.5, 0.520_499_9),
            (1.0, 0.842_700_8),
            (-2.0, -0.995_322_3),
        ] {
            assert!((erf(x) - want).abs() < 3e-7, "erf({x}) = {}", erf(x));
        }
    }
}
