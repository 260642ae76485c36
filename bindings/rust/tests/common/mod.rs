#![allow(dead_code)]
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use tokitai_jit::{Backend, Config, Context};

/// A fresh folder under the system's temporary folder, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "tk-rust-{}-{}-{}",
            tag,
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn stub_config(cache: &Path) -> Config {
    Config::new().unwrap().backend(Backend::Stub).unwrap().cache_dir(cache).unwrap()
}

pub fn stub_context(cache: &Path) -> Context {
    Context::with_config(&stub_config(cache)).unwrap()
}

/// Deterministic fp16 bit patterns of values in [-1, 1).
pub fn random_f16(n: usize, seed: u64) -> Vec<u16> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let x = ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
            tokitai_jit::f32_to_f16(x)
        })
        .collect()
}
