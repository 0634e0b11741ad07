//! How long the gradient all-reduce of a data-parallel step takes over MPI, for the gradients of
//! BERT-mini, MiniLM-L6 and BERT-base (every parameter tensor at its real size), the way
//! `bertpipe train` sums them: packed into 25 MiB buckets, one `MPI_Allreduce` per bucket —
//! beside one call per tensor. Prints the median of 10 rounds after 2 warm-ups, on rank 0.
//!
//! `mpirun -n 2 target/release/examples/allreduce` (built with `--features mpi`; run by
//! `benches/data_parallel.sh`).

use std::time::Instant;

use anyhow::Result;
use bertpipe::train::dist;

/// The parameter tensors of a BERT encoder with a classification head (HF's names and shapes).
fn tensors(hidden: usize, layers: usize, intermediate: usize) -> Vec<usize> {
    let (vocab, positions, h) = (30522, 512, hidden);
    let mut t = vec![vocab * h, positions * h, 2 * h, h, h];
    for _ in 0..layers {
        t.extend([h * h, h, h * h, h, h * h, h, h * h, h, h, h]); // q, k, v, attention output, LayerNorm
        t.extend([intermediate * h, intermediate, h * intermediate, h, h, h]); // feed-forward, LayerNorm
    }
    t.extend([h * h, h, 2 * h, 2]); // pooler, classifier
    t
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() -> Result<()> {
    let world = dist::world()?;
    let bucket = dist::bucket_floats();
    if world.is_main() {
        println!(
            "{} ranks ({}), MPI all-reduce of f32 gradients; median of 10 after 2 warm-ups",
            world.size,
            world.launcher.name()
        );
        println!(
            "{:<10} {:>12} {:>10} {:>16} {:>16} {:>12}",
            "model", "parameters", "tensors", "25 MiB buckets", "per tensor", "bus GB/s"
        );
    }
    for (name, hidden, layers, intermediate) in
        [("bert-mini", 256, 4, 1024), ("minilm-l6", 384, 6, 1536), ("bert-base", 768, 12, 3072)]
    {
        let sizes = tensors(hidden, layers, intermediate);
        let params: usize = sizes.iter().sum();
        let mut grads = vec![1.0f32; params];
        let mut time = |per_tensor: bool| -> Result<f64> {
            let mut runs = Vec::new();
            for round in 0..12 {
                dist::barrier(&world);
                let t = Instant::now();
                if per_tensor {
                    let mut at = 0;
                    for &n in &sizes {
                        dist::sum_f32(&world, &mut grads[at..at + n])?;
                        at += n;
                    }
                } else {
                    for chunk in grads.chunks_mut(bucket) {
                        dist::sum_f32(&world, chunk)?;
                    }
                }
                if round >= 2 {
                    runs.push(t.elapsed().as_secs_f64());
                }
            }
            Ok(median(runs))
        };
        let (bucketed, per_tensor) = (time(false)?, time(true)?);
        // A ring all-reduce moves 2(N−1)/N of the buffer through each rank: its bus bandwidth.
        let n = world.size as f64;
        let bus = 2.0 * (n - 1.0) / n * 4.0 * params as f64 / bucketed / 1e9;
        if world.is_main() {
            println!(
                "{name:<10} {:>11.1}M {:>10} {:>13.1} ms {:>13.1} ms {bus:>12.2}",
                params as f64 / 1e6,
                sizes.len(),
                bucketed * 1e3,
                per_tensor * 1e3
            );
        }
    }
    dist::finish();
    Ok(())
}
