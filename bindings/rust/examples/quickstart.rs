use tokitai_jit::{reference, Config, Context, KernelArg, KernelDesc, Stream};

fn main() -> Result<(), tokitai_jit::Error> {
    let ctx = Context::with_config(&Config::new()?.cache_dir("/tmp/tk-cache")?)?;
    let (m, n, k) = (256, 512, 128);
    let a: Vec<u16> = (0..m * k).map(|i| tokitai_jit::f32_to_f16((i % 7) as f32 * 0.25)).collect();
    let b: Vec<u16> = (0..k * n).map(|i| tokitai_jit::f32_to_f16((i % 5) as f32 * 0.5)).collect();
    let (da, db, mut dc) = (ctx.upload(&a)?, ctx.upload(&b)?, ctx.zeros::<f32>(m * n)?);
    ctx.gemm_f16_fwd(m, n, k, &da, &db, &mut dc, Stream::DEFAULT)?; // compiled once, then cached on disk
    let (c, want) = (dc.to_vec()?, reference::gemm_f16_fwd(m, n, k, &a, &b)?);
    println!("{} on {}: C[0] = {} (CPU reference {})", ctx.backend_name(), ctx.target(), c[0], want[0]);
    let kernel = ctx.kernel(&KernelDesc::source(r#"extern "C" __global__ void scale(float *x, float s, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= s * FACTOR; }"#, "scale").define("FACTOR", 2))?;
    unsafe { kernel.launch([(m * n / 256) as u32, 1, 1], [256, 1, 1], 0, Stream::DEFAULT, &mut [KernelArg::output(&mut dc), 0.5f32.into(), ((m * n) as i32).into()])? };
    ctx.sync(Stream::DEFAULT)
}
