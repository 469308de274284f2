//! The encoder's arithmetic: `x · Wᵀ` over weights dequantised a panel of
//! rows at a time (never the whole matrix), LayerNorm, BERT's exact GELU and
//! one sequence's softmax attention. Three ways to multiply, chosen per call:
//! few rows (a query) — an AVX2/FMA dot kernel over 4 weight rows at a time;
//! many rows with AVX-512 — a 6 × 64 outer-product kernel over a transposed
//! panel; else `matrixmultiply`'s sgemm. Each SIMD kernel is used only once
//! the CPU is seen to have its features, with plain code behind it.
//!
//! Owns: the crate's only unsafe code — the calls into `matrixmultiply`'s
//! `sgemm` (an `unsafe fn` over raw pointers) and the SIMD kernels' loads and
//! stores, each bounds-checked in front of it with its SAFETY note. Must
//! never: read past a buffer (every pointer and stride is derived from a
//! slice whose length is asserted), allocate per row or per tile, or know
//! where weights come from (a row reader is passed in).

use std::cell::RefCell;

use rayon::prelude::*;

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
    if m <= SMALL_M {
        return linear_small(x, m, k, n, &row, bias, out, parallel);
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        return linear_avx512(x, m, k, n, &row, bias, out, parallel);
    }
    linear_sgemm(x, m, k, n, &row, bias, out, parallel);
}

/// `linear` through `matrixmultiply`'s sgemm: the path for many rows on a
/// CPU without AVX-512.
#[allow(clippy::too_many_arguments)]
fn linear_sgemm<R>(
    x: &[f32],
    m: usize,
    k: usize,
    n: usize,
    row: &R,
    bias: &[f32],
    out: &mut [f32],
    parallel: bool,
) where
    R: Fn(usize, &mut [f32]) + Sync,
{
    // One panel per thread: sgemm packs `x` again for every call, so fewer,
    // larger panels (a whole 1536 x 384 matrix is 2.4 MB) beat cache-sized
    // ones (64 rows packed `x` 24 times and spent a quarter of the time there).
    let threads = if parallel {
        rayon::current_num_threads()
    } else {
        1
    };
    let panel = n.div_ceil(threads).next_multiple_of(16);
    let panels = n.div_ceil(panel);
    let fill = |p: usize, buf: &mut Vec<f32>| -> usize {
        let r0 = p * panel;
        let rows = panel.min(n - r0);
        buf.resize(rows * k, 0.0);
        for (r, chunk) in buf.chunks_exact_mut(k).enumerate() {
            row(r0 + r, chunk);
        }
        rows
    };
    if panels > 1 {
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
            let c0 = p * panel;
            for i in 0..m {
                out[i * n + c0..i * n + c0 + rows].copy_from_slice(&part[i * rows..(i + 1) * rows]);
            }
        }
    } else {
        PANEL_BUF.with(|cell| {
            let mut buf = cell.borrow_mut();
            for p in 0..panels {
                let rows = fill(p, &mut buf);
                let c0 = p * panel;
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

/// Output columns per panel of [`gemm_avx512`]: 4 vectors of 16.
const NR: usize = 64;
/// Rows of `x` per step of [`kernel_avx512`].
const MR: usize = 6;

/// `linear` with AVX-512 for many rows: columns split over threads when
/// `parallel`, each part computed by [`gemm_avx512`] (then scattered), or
/// written in place.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
fn linear_avx512<R>(
    x: &[f32],
    m: usize,
    k: usize,
    n: usize,
    row: &R,
    bias: &[f32],
    out: &mut [f32],
    parallel: bool,
) where
    R: Fn(usize, &mut [f32]) + Sync,
{
    let threads = if parallel {
        rayon::current_num_threads().min(n.div_ceil(NR))
    } else {
        1
    };
    if threads > 1 {
        let per = n.div_ceil(threads).next_multiple_of(NR);
        let parts: Vec<(usize, usize, Vec<f32>)> = (0..n.div_ceil(per))
            .into_par_iter()
            .map(|p| {
                let c0 = p * per;
                let cols = per.min(n - c0);
                let mut part = vec![0.0f32; m * cols];
                gemm_avx512(x, m, k, c0, cols, row, &mut part, cols);
                (c0, cols, part)
            })
            .collect();
        for (c0, cols, part) in parts {
            for i in 0..m {
                out[i * n + c0..i * n + c0 + cols].copy_from_slice(&part[i * cols..(i + 1) * cols]);
            }
        }
    } else {
        gemm_avx512(x, m, k, 0, n, row, out, n);
    }
    for row in out.chunks_exact_mut(n) {
        for (o, b) in row.iter_mut().zip(bias) {
            *o += b;
        }
    }
}

/// `out[i * ldo + j] = x[i] · W[c0 + j]` for `i < m`, `j < cols`: weight rows
/// dequantised 64 at a time into a panel laid out `k × 64` (row `kk` holding
/// the 64 rows' `kk`-th values), then every 6 rows of `x` against it by
/// [`kernel_avx512`].
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
fn gemm_avx512<R>(
    x: &[f32],
    m: usize,
    k: usize,
    c0: usize,
    cols: usize,
    row: &R,
    out: &mut [f32],
    ldo: usize,
) where
    R: Fn(usize, &mut [f32]) + Sync,
{
    assert!(x.len() >= m * k && cols <= ldo && out.len() >= (m - 1) * ldo + cols);
    let mut rows_buf = vec![0.0f32; NR * k];
    let mut panel = vec![0.0f32; k * NR];
    for p0 in (0..cols).step_by(NR) {
        let pc = NR.min(cols - p0);
        for (j, r) in rows_buf.chunks_exact_mut(k).take(pc).enumerate() {
            row(c0 + p0 + j, r);
        }
        // Transposed 16 values of k at a time, so the 16 panel rows written
        // stay in L1 while all 64 weight rows pass.
        for b in (0..k).step_by(16) {
            let e = (b + 16).min(k);
            for (j, r) in rows_buf.chunks_exact(k).take(pc).enumerate() {
                for (kk, v) in r[b..e].iter().enumerate() {
                    panel[(b + kk) * NR + j] = *v;
                }
            }
        }
        for i0 in (0..m).step_by(MR) {
            let rows = MR.min(m - i0);
            #[allow(unsafe_code)]
            // SAFETY: linear_avx512 is only called once the CPU was seen to
            // have AVX-512F, the only feature kernel_avx512 needs.
            let tile = unsafe { kernel_avx512(x, i0, rows, k, &panel) };
            for (r, t) in tile.iter().enumerate().take(rows) {
                let o = (i0 + r) * ldo + p0;
                out[o..o + pc].copy_from_slice(&t[..pc]);
            }
        }
    }
}

/// Rows `i0..i0 + rows` (at most 6) of `x` times a `k × 64` panel: 24
/// accumulators, each step 4 panel loads and 6 broadcasts for 24 FMAs.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(unsafe_code)]
fn kernel_avx512(x: &[f32], i0: usize, rows: usize, k: usize, panel: &[f32]) -> [[f32; NR]; MR] {
    use std::arch::x86_64::*;
    assert!((1..=MR).contains(&rows) && (i0 + rows) * k <= x.len() && panel.len() >= k * NR);
    // Past the last row, repeat it (results unused).
    let xr: [&[f32]; MR] = std::array::from_fn(|r| {
        let i = i0 + r.min(rows - 1);
        &x[i * k..][..k]
    });
    let mut acc = [[_mm512_setzero_ps(); 4]; MR];
    for kk in 0..k {
        // SAFETY: kk < k, so kk * NR + 64 <= k * NR <= panel.len() (asserted
        // above): the four 16-float loads are inside the panel.
        let b = unsafe {
            let p = panel.as_ptr().add(kk * NR);
            [
                _mm512_loadu_ps(p),
                _mm512_loadu_ps(p.add(16)),
                _mm512_loadu_ps(p.add(32)),
                _mm512_loadu_ps(p.add(48)),
            ]
        };
        for (a, xs) in acc.iter_mut().zip(&xr) {
            let v = _mm512_set1_ps(xs[kk]);
            for (q, bq) in b.iter().enumerate() {
                a[q] = _mm512_fmadd_ps(v, *bq, a[q]);
            }
        }
    }
    let mut out = [[0.0f32; NR]; MR];
    for (o, a) in out.iter_mut().zip(&acc) {
        for (q, v) in a.iter().enumerate() {
            // SAFETY: o holds 64 floats; q < 4, so 16 * q + 16 <= 64.
            unsafe { _mm512_storeu_ps(o.as_mut_ptr().add(16 * q), *v) };
        }
    }
    out
}

/// Up to this many tokens (a query, a short memory) take [`linear_small`]:
/// sgemm's packing of the weights costs more than it saves when each weight
/// is used by so few rows.
const SMALL_M: usize = 48;

/// Weight rows dequantised and dotted at once by the dot kernel ([`dot4`]).
const TILE: usize = 4;

/// `linear` for few rows: each tile of 4 weight rows is dequantised into a
/// small buffer (24 KB at most, in L1) and dotted with every row of `x` by
/// [`small_rows`], no packing; the result is built transposed (`n × m`, one
/// contiguous part per thread) and scattered into `out`.
#[allow(clippy::too_many_arguments)]
fn linear_small<R>(
    x: &[f32],
    m: usize,
    k: usize,
    n: usize,
    row: &R,
    bias: &[f32],
    out: &mut [f32],
    parallel: bool,
) where
    R: Fn(usize, &mut [f32]) + Sync,
{
    let threads = if parallel {
        rayon::current_num_threads().min(n.div_ceil(64))
    } else {
        1
    };
    let per = n.div_ceil(threads.max(1)).next_multiple_of(TILE);
    let mut transposed = vec![0.0f32; n * m];
    let work = |(p, part): (usize, &mut [f32])| {
        let r0 = p * per;
        small_rows(x, m, k, r0, part, row);
    };
    if threads > 1 {
        transposed
            .par_chunks_mut(per * m)
            .enumerate()
            .for_each(work);
    } else {
        transposed.chunks_mut(per * m).enumerate().for_each(work);
    }
    for (q, (col, b)) in transposed.chunks_exact(m).zip(bias).enumerate() {
        for (i, v) in col.iter().enumerate() {
            out[i * n + q] = v + b;
        }
    }
}

/// Rows `r0..` of `Wᵀ x` into `part` (`rows × m`, row `q` holding weight row
/// `r0 + q` dotted with each row of `x`): AVX2 and FMA when the CPU has them,
/// else plain code.
fn small_rows<R>(x: &[f32], m: usize, k: usize, r0: usize, part: &mut [f32], row: &R)
where
    R: Fn(usize, &mut [f32]) + Sync,
{
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        return small_rows_with(x, m, k, r0, part, row, |x, w| {
            #[allow(unsafe_code)]
            // SAFETY: the CPU was just seen to have AVX2 and FMA, the only
            // features dot4_avx2 needs.
            unsafe {
                dot4_avx2(x, w)
            }
        });
    }
    small_rows_with(x, m, k, r0, part, row, dot4);
}

fn small_rows_with<R, D>(
    x: &[f32],
    m: usize,
    k: usize,
    r0: usize,
    part: &mut [f32],
    row: &R,
    dot: D,
) where
    R: Fn(usize, &mut [f32]) + Sync,
    D: Fn([&[f32]; 2], [&[f32]; TILE]) -> [[f32; TILE]; 2],
{
    let mut buf = vec![0.0f32; TILE * k];
    for (t, out) in part.chunks_mut(TILE * m).enumerate() {
        let rows = out.len() / m;
        for (j, chunk) in buf.chunks_exact_mut(k).take(rows).enumerate() {
            row(r0 + t * TILE + j, chunk);
        }
        let (w0, rest) = buf.split_at(k);
        let (w1, rest) = rest.split_at(k);
        let (w2, w3) = rest.split_at(k);
        let w = [w0, w1, w2, w3];
        for i in (0..m).step_by(2) {
            let x0 = &x[i * k..(i + 1) * k];
            let x1 = if i + 1 < m {
                &x[(i + 1) * k..(i + 2) * k]
            } else {
                x0
            };
            let dots = dot([x0, x1], w);
            for j in 0..rows {
                out[j * m + i] = dots[0][j];
                if i + 1 < m {
                    out[j * m + i + 1] = dots[1][j];
                }
            }
        }
    }
}

/// Two rows of `x` dotted with each of 4 weight rows as long (portable).
fn dot4(x: [&[f32]; 2], w: [&[f32]; TILE]) -> [[f32; TILE]; 2] {
    x.map(|x| w.map(|r| x.iter().zip(r).map(|(a, b)| a * b).sum()))
}

/// [`dot4`] with AVX2 and FMA, 8 lanes: a 2 × 4 tile of accumulators, so each
/// step's 8 FMAs need 6 loads, and 8 independent chains keep both FMA ports
/// busy.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(unsafe_code)]
fn dot4_avx2(x: [&[f32]; 2], w: [&[f32]; TILE]) -> [[f32; TILE]; 2] {
    use std::arch::x86_64::*;
    let k = x[0].len();
    assert!(x[1].len() == k && w.iter().all(|r| r.len() == k));
    let whole = k / 8 * 8;
    let mut acc = [[_mm256_setzero_ps(); TILE]; 2];
    let mut c = 0;
    while c < whole {
        // SAFETY: c + 8 <= whole <= k, the length of both x rows and of
        // every weight row (asserted above): each 8-float load is inside its
        // slice.
        unsafe {
            let x0 = _mm256_loadu_ps(x[0].as_ptr().add(c));
            let x1 = _mm256_loadu_ps(x[1].as_ptr().add(c));
            for (j, r) in w.iter().enumerate() {
                let wv = _mm256_loadu_ps(r.as_ptr().add(c));
                acc[0][j] = _mm256_fmadd_ps(x0, wv, acc[0][j]);
                acc[1][j] = _mm256_fmadd_ps(x1, wv, acc[1][j]);
            }
        }
        c += 8;
    }
    let mut out = [[0.0f32; TILE]; 2];
    for (i, row) in out.iter_mut().enumerate() {
        for (j, o) in row.iter_mut().enumerate() {
            let v = acc[i][j];
            let h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
            let h = _mm_add_ss(h, _mm_shuffle_ps::<1>(h, h));
            *o = _mm_cvtss_f32(h)
                + x[i][whole..]
                    .iter()
                    .zip(&w[j][whole..])
                    .map(|(a, b)| a * b)
                    .sum::<f32>();
        }
    }
    out
}

/// `out[i] = src[i] as i8 × scale`: an int8 weight row dequantised, with
/// AVX2 when the CPU has it (the same loop, compiled for it).
pub(crate) fn dequantise_i8(src: &[u8], scale: f32, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        #[allow(unsafe_code)]
        // SAFETY: the CPU was just seen to have AVX2, the only feature
        // dequantise_i8_avx2 is compiled for; its body is safe code.
        unsafe {
            dequantise_i8_avx2(src, scale, out);
        }
        return;
    }
    dequantise_i8_body(src, scale, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn dequantise_i8_avx2(src: &[u8], scale: f32, out: &mut [f32]) {
    dequantise_i8_body(src, scale, out);
}

#[inline(always)]
fn dequantise_i8_body(src: &[u8], scale: f32, out: &mut [f32]) {
    for (o, &b) in out.iter_mut().zip(src) {
        *o = f32::from(b as i8) * scale;
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

/// `e^x` for `x` in [-87, 88] (clamped there), relative error under 2e-7
/// (Cephes' `expf` polynomial): branch-free, so a loop of it vectorises,
/// which libm's `expf` call does not.
#[inline(always)]
fn exp(x: f32) -> f32 {
    let x = x.clamp(-87.0, 88.0);
    let n = (x * std::f32::consts::LOG2_E + 0.5).floor();
    let r = x - n * 0.693_359_4 + n * 2.121_944_4e-4;
    let mut p = 1.987_569_1e-4;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 0.166_666_65;
    p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    // n is a whole number in [-125, 127]: 1.5 × 2^23 + n holds it in its
    // low mantissa bits, whence 2^n's exponent field, n + 127 (no float to
    // int conversion, whose saturation would not vectorise).
    let bits = (n + 12_582_912.0).to_bits().wrapping_sub(0x4B40_0000);
    y * f32::from_bits(bits.wrapping_add(127) << 23)
}

/// The error function, Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7, below
/// float32's resolution near 1): what models/distill.py computes.
#[inline(always)]
fn erf(x: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let y = 1.0
        - (((((1.061_405_4 * t - 1.453_152_1) * t) + 1.421_413_8) * t - 0.284_496_74) * t
            + 0.254_829_6)
            * t
            * exp(-a * a);
    y.copysign(x)
}

/// BERT's exact GELU, `x Φ(x)`, in place: with AVX2 and FMA when the CPU has
/// them (the same loop, compiled for them).
pub(crate) fn gelu(x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        #[allow(unsafe_code)]
        // SAFETY: the CPU was just seen to have AVX2 and FMA, the only
        // features gelu_avx2 is compiled for; its body is safe code.
        unsafe {
            gelu_avx2(x)
        };
        return;
    }
    gelu_body(x);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn gelu_avx2(x: &mut [f32]) {
    gelu_body(x);
}

#[inline(always)]
fn gelu_body(x: &mut [f32]) {
    for v in x {
        *v = 0.5 * *v * (1.0 + erf(*v * std::f32::consts::FRAC_1_SQRT_2));
    }
}

/// Softmax of each row of `s` (rows of `len`), in place.
pub(crate) fn softmax_rows(s: &mut [f32], len: usize) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        #[allow(unsafe_code)]
        // SAFETY: as in gelu: AVX2 and FMA were just seen, and
        // softmax_rows_avx2's body is safe code.
        unsafe {
            softmax_rows_avx2(s, len)
        };
        return;
    }
    softmax_rows_body(s, len);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn softmax_rows_avx2(s: &mut [f32], len: usize) {
    softmax_rows_body(s, len);
}

#[inline(always)]
fn softmax_rows_body(s: &mut [f32], len: usize) {
    for row in s.chunks_exact_mut(len) {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        for v in row.iter_mut() {
            *v = exp(*v - max);
        }
        let inv = 1.0 / row.iter().sum::<f32>();
        row.iter_mut().for_each(|v| *v *= inv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_matches_a_plain_loop_in_both_modes() {
        for (m, k, n) in [(5, 7, 130), (3, 40, 9), (70, 33, 70), (61, 48, 200)] {
            check_linear(m, k, n);
        }
    }

    /// Each path alone (the dispatch above takes only one of them on a
    /// given CPU): the portable and AVX2 dot kernels, sgemm, AVX-512.
    #[test]
    fn every_path_matches_a_plain_loop() {
        for (m, k, n) in [(5, 7, 130), (3, 40, 9), (70, 33, 70), (61, 48, 200)] {
            let x: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
            let w: Vec<f32> = (0..n * k).map(|i| (i as f32 * 0.11).cos()).collect();
            let bias: Vec<f32> = (0..n).map(|i| i as f32 * 0.01).collect();
            let row = |r: usize, buf: &mut [f32]| buf.copy_from_slice(&w[r * k..(r + 1) * k]);
            let dot = |i: usize, j: usize| -> f32 {
                (0..k).map(|t| x[i * k + t] * w[j * k + t]).sum::<f32>()
            };
            let close = |a: f32, b: f32, what: &str| {
                assert!((a - b).abs() < 1e-4, "{what}: {a} vs {b} ({m}, {k}, {n})")
            };
            // The dot kernels fill a transposed part (n × m), without bias.
            let mut part = vec![0.0; n * m];
            small_rows_with(&x, m, k, 0, &mut part, &row, dot4);
            for j in 0..n {
                for i in 0..m {
                    close(part[j * m + i], dot(i, j), "portable dot");
                }
            }
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                let mut part = vec![0.0; n * m];
                #[allow(unsafe_code)]
                small_rows_with(&x, m, k, 0, &mut part, &row, |x, w| {
                    // SAFETY: AVX2 and FMA were just seen.
                    unsafe { dot4_avx2(x, w) }
                });
                for j in 0..n {
                    for i in 0..m {
                        close(part[j * m + i], dot(i, j), "AVX2 dot");
                    }
                }
            }
            for parallel in [false, true] {
                let mut out = vec![0.0; m * n];
                linear_sgemm(&x, m, k, n, &row, &bias, &mut out, parallel);
                for i in 0..m {
                    for j in 0..n {
                        close(out[i * n + j], dot(i, j) + bias[j], "sgemm");
                    }
                }
                #[cfg(target_arch = "x86_64")]
                if std::arch::is_x86_feature_detected!("avx512f") {
                    let mut out = vec![0.0; m * n];
                    linear_avx512(&x, m, k, n, &row, &bias, &mut out, parallel);
                    for i in 0..m {
                        for j in 0..n {
                            close(out[i * n + j], dot(i, j) + bias[j], "AVX-512");
                        }
                    }
                }
            }
        }
    }

    fn check_linear(m: usize, k: usize, n: usize) {
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
    fn exp_is_accurate() {
        for i in -870..=880 {
            let x = i as f32 / 10.0;
            let (got, want) = (exp(x), x.exp());
            assert!(
                ((got - want) / want).abs() < 3e-7,
                "exp({x}) = {got}, not {want}"
            );
        }
        assert_eq!(exp(-1000.0), exp(-87.0));
    }

    #[test]
    fn gelu_and_softmax_match_plain_formulas() {
        let xs: Vec<f32> = (-60..=60).map(|i| i as f32 / 10.0).collect();
        let mut g = xs.clone();
        gelu(&mut g);
        for (x, y) in xs.iter().zip(&g) {
            let want = 0.5 * x * (1.0 + erf_libm(x / std::f32::consts::SQRT_2));
            assert!((y - want).abs() < 1e-6, "gelu({x}) = {y}, not {want}");
        }
        let mut s = vec![1.0, 2.0, 3.0, -1.0, 0.0, 1.0];
        softmax_rows(&mut s, 3);
        let e = [1.0f32.exp(), 2.0f32.exp(), 3.0f32.exp()];
        let sum: f32 = e.iter().sum();
        for (got, want) in s.iter().zip(e.iter().chain(&e).map(|v| v / sum)) {
            assert!((got - want).abs() < 1e-6, "{got} vs {want}");
        }
    }

    /// erf through libm's exp, the reference for the fast one.
    fn erf_libm(x: f32) -> f32 {
        let a = x.abs();
        let t = 1.0 / (1.0 + 0.327_591_1 * a);
        let y = 1.0
            - (((((1.061_405_4 * t - 1.453_152_1) * t) + 1.421_413_8) * t - 0.284_496_74) * t
                + 0.254_829_6)
                * t
                * (-a * a).exp();
        y.copysign(x)
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
