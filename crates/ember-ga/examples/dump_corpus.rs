//! Writes the CUDA compile corpus to a directory (default `./cuda_corpus`).
fn main() -> std::io::Result<()> {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "cuda_corpus".into());
    std::fs::create_dir_all(&dir)?;
    for (name, src) in ember_ga::cuda::compile_corpus() {
        std::fs::write(format!("{dir}/{name}.cu"), src)?;
    }
    Ok(())
}
