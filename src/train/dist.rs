//! Data-parallel training: which rank this process is, and the collectives between ranks.
//!
//! The launcher says how many ranks there are and which one this is: `mpirun`
//! (`OMPI_COMM_WORLD_RANK`/`_SIZE`/`_LOCAL_RANK`, or MPICH's `PMI_RANK`/`PMI_SIZE`), `srun`
//! (`SLURM_PROCID`, `SLURM_STEP_NUM_TASKS`, `SLURM_LOCALID`, set for each task of a job step), or
//! torchrun (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`). One rank is exactly a run without a launcher:
//! no collective is ever called. More ranks talk over MPI (the `mpi` Cargo feature, OpenMPI
//! from Debian): gradients are summed in buckets, a few scalars per step (the loss, the stop
//! flag), and the evaluation's predictions gathered. The library does the networking; under
//! `srun` it needs Slurm's PMIx plugin (`srun --mpi=pmix`), under torchrun an MPI that can
//! join the processes torchrun started — which OpenMPI cannot, so torchrun with more than one
//! rank is refused on the CPU with the launchers that work.
//!
//! A rank that fails prints its error with its rank and aborts the job
//! ([`abort_others`]), so the other ranks exit instead of waiting in a collective.

use std::sync::OnceLock;

use anyhow::{bail, Result};

/// How this process was started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    /// No launcher: one process.
    None,
    Mpirun,
    Srun,
    Torchrun,
}

impl Launcher {
    pub fn name(self) -> &'static str {
        match self {
            Launcher::None => "no launcher",
            Launcher::Mpirun => "mpirun",
            Launcher::Srun => "srun",
            Launcher::Torchrun => "torchrun",
        }
    }
}

/// This process's place among the ranks of a data-parallel run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct World {
    pub rank: usize,
    pub size: usize,
    /// The rank's index on its node (which GPU it takes).
    pub local_rank: usize,
    pub launcher: Launcher,
}

impl World {
    pub const SINGLE: World = World { rank: 0, size: 1, local_rank: 0, launcher: Launcher::None };

    /// The rank that writes checkpoints, logs and the final model.
    pub fn is_main(&self) -> bool {
        self.rank == 0
    }

    /// `rank 1 of 2 (mpirun, local rank 1)`, or `one process (no launcher)`.
    pub fn describe(&self) -> String {
        if self.size == 1 {
            format!("one process ({})", self.launcher.name())
        } else {
            format!("rank {} of {} ({}, local rank {})", self.rank, self.size, self.launcher.name(), self.local_rank)
        }
    }

    /// What the launcher's variables say, read through `var` (the environment, or a test's).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<World> {
        let num = |name: &str| -> Result<Option<usize>> {
            match var(name) {
                None => Ok(None),
                Some(v) => match v.trim().parse::<usize>() {
                    Ok(n) => Ok(Some(n)),
                    Err(_) => bail!("the launcher's variable {name}={v:?} is not a number"),
                },
            }
        };
        // mpirun inside a Slurm allocation sets both: its own variables win.
        let found = [
            (Launcher::Mpirun, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
            (Launcher::Mpirun, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
            // Set for the tasks of a job step (`srun`), not in a batch script itself.
            (Launcher::Srun, "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID"),
            (Launcher::Torchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK"),
        ];
        for (launcher, rank, size, local) in found {
            let (Some(r), Some(n)) = (num(rank)?, num(size)?) else { continue };
            if n == 0 || r >= n {
                bail!("the launcher says rank {r} of {n} ({rank}, {size}): not a rank of that many");
            }
            let local_rank = num(local)?.unwrap_or(0);
            return Ok(World { rank: r, size: n, local_rank, launcher });
        }
        Ok(World::SINGLE)
    }
}

static WORLD: OnceLock<std::result::Result<World, String>> = OnceLock::new();

/// This process's world: read from the launcher's variables once, with MPI started when there
/// is more than one rank. Later calls return the same.
pub fn world() -> Result<World> {
    WORLD.get_or_init(|| init().map_err(|e| format!("{e:#}"))).clone().map_err(anyhow::Error::msg)
}

fn init() -> Result<World> {
    let w = World::from_vars(|k| std::env::var(k).ok())?;
    if w.size == 1 {
        return Ok(w);
    }
    imp::start(w)
}

/// Refuses `bertpipe COMMAND` (or its library call) started as more than one rank by a
/// launcher: every rank would write the same folder. The error names the rank and says what to
/// run instead (`instead`); only `bertpipe train` runs as ranks.
pub fn refuse_as_ranks(command: &str, instead: &str) -> Result<()> {
    let w = World::from_vars(|k| std::env::var(k).ok())?;
    if w.size > 1 {
        let launcher = if w.launcher == Launcher::Srun { "srun --mpi=pmix" } else { "mpirun" };
        bail!(
            "rank {} of {} ({}): `bertpipe {command}` does not run under a launcher: every rank would write the same folder; run {instead} (only `{launcher} -n N bertpipe train TRAIN.yaml` and a chain's train stage, `bertpipe run EXP.yaml --stage NAME`, run as ranks)",
            w.rank,
            w.size,
            w.launcher.name()
        );
    }
    Ok(())
}

/// Ends MPI cleanly when it was started (at the end of `main`).
pub fn finish() {
    imp::finish();
}

/// After an error on this rank, with more than one rank: ends every rank of the job (MPI_Abort),
/// so none is left waiting in a collective for this one. Returns when there is nothing to end.
pub fn abort_others(code: i32) {
    if let Some(Ok(w)) = WORLD.get() {
        if w.size > 1 {
            imp::abort(code);
        }
    }
}

/// The gradients' bucket size for the all-reduce: PyTorch DDP's default 25 MiB, or
/// `BERTPIPE_BUCKET_MB`.
pub fn bucket_floats() -> usize {
    let mb = std::env::var("BERTPIPE_BUCKET_MB").ok().and_then(|v| v.parse::<f64>().ok()).unwrap_or(25.0);
    ((mb * (1 << 20) as f64 / 4.0) as usize).max(1024)
}

/// Sums `data` over every rank, in place (a no-op with one rank).
pub fn sum_f32(w: &World, data: &mut [f32]) -> Result<()> {
    if w.size == 1 || data.is_empty() {
        return Ok(());
    }
    imp::sum_f32(data)
}

/// Sums `data` over every rank, in place (a no-op with one rank).
pub fn sum_f64(w: &World, data: &mut [f64]) -> Result<()> {
    if w.size == 1 || data.is_empty() {
        return Ok(());
    }
    imp::sum_f64(data)
}

/// Every rank's bytes, in rank order (this rank's alone with one rank).
pub fn gather_bytes(w: &World, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
    if w.size == 1 {
        return Ok(vec![mine.to_vec()]);
    }
    imp::gather_bytes(mine, w.size)
}

/// Waits for every rank.
pub fn barrier(w: &World) {
    if w.size > 1 {
        imp::barrier();
    }
}

#[cfg(feature = "mpi")]
mod imp {
    use std::sync::Mutex;

    use anyhow::{bail, Result};
    use mpi::collective::SystemOperation;
    use mpi::datatype::PartitionMut;
    use mpi::traits::*;

    use super::World;

    /// MPI's handle. Started with `MPI_THREAD_SERIALIZED` and only used under this lock, so
    /// any thread may call a collective, one at a time.
    struct Mpi(mpi::environment::Universe);
    // SAFETY: MPI was initialised for serialized use from any thread, and the mutex serialises
    // every call.
    unsafe impl Send for Mpi {}

    static MPI: Mutex<Option<Mpi>> = Mutex::new(None);

    fn with<T>(f: impl FnOnce(&mpi::topology::SimpleCommunicator) -> T) -> Result<T> {
        let guard = MPI.lock().unwrap_or_else(|e| e.into_inner());
        match guard.as_ref() {
            Some(m) => Ok(f(&m.0.world())),
            None => bail!("MPI is not running (it ended, or never started)"),
        }
    }

    pub fn start(w: World) -> Result<World> {
        let Some((universe, threading)) = mpi::initialize_with_threading(mpi::Threading::Serialized) else {
            bail!("MPI was already started in this process");
        };
        if threading < mpi::Threading::Serialized {
            bail!("this MPI gives threading level {threading:?}; bertpipe needs Serialized");
        }
        let comm = universe.world();
        let (rank, size) = (comm.rank() as usize, comm.size() as usize);
        *MPI.lock().unwrap_or_else(|e| e.into_inner()) = Some(Mpi(universe));
        if (rank, size) != (w.rank, w.size) {
            let hint = match w.launcher {
                super::Launcher::Torchrun => {
                    "torchrun starts processes MPI cannot join: on the CPU, launch with `mpirun -n N` or `srun -n N --mpi=pmix`"
                }
                super::Launcher::Srun => {
                    "srun started the tasks without MPI's process manager: add `--mpi=pmix` (`srun --mpi=list` shows what this Slurm has)"
                }
                _ => "the launcher and MPI disagree",
            };
            finish();
            bail!(
                "{} says this is rank {} of {}, but MPI sees rank {rank} of {size}: {hint}",
                w.launcher.name(),
                w.rank,
                w.size
            );
        }
        Ok(w)
    }

    pub fn finish() {
        // Dropping the universe calls MPI_Finalize.
        drop(MPI.lock().unwrap_or_else(|e| e.into_inner()).take());
    }

    pub fn abort(code: i32) {
        let guard = MPI.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = guard.as_ref() {
            m.0.world().abort(code);
        }
    }

    pub fn sum_f32(data: &mut [f32]) -> Result<()> {
        with(|c| {
            let send = data.to_vec();
            c.all_reduce_into(&send[..], data, SystemOperation::sum());
        })
    }

    pub fn sum_f64(data: &mut [f64]) -> Result<()> {
        with(|c| {
            let send = data.to_vec();
            c.all_reduce_into(&send[..], data, SystemOperation::sum());
        })
    }

    pub fn gather_bytes(mine: &[u8], size: usize) -> Result<Vec<Vec<u8>>> {
        with(|c| {
            let len = mine.len() as i32;
            let mut lens = vec![0i32; size];
            c.all_gather_into(&len, &mut lens[..]);
            let displs: Vec<i32> = lens.iter().scan(0, |at, &n| Some(std::mem::replace(at, *at + n))).collect();
            let mut all = vec![0u8; lens.iter().map(|&n| n as usize).sum()];
            {
                let mut part = PartitionMut::new(&mut all[..], &lens[..], &displs[..]);
                c.all_gather_varcount_into(mine, &mut part);
            }
            lens.iter().zip(&displs).map(|(&n, &at)| all[at as usize..(at + n) as usize].to_vec()).collect()
        })
    }

    pub fn barrier() {
        let _ = with(|c| c.barrier());
    }
}

#[cfg(not(feature = "mpi"))]
mod imp {
    use anyhow::{bail, Result};

    use super::World;

    fn unbuilt() -> anyhow::Error {
        anyhow::anyhow!("this bertpipe was built without MPI")
    }

    pub fn start(w: World) -> Result<World> {
        bail!(
            "{} started {} ranks, but this bertpipe was built without MPI, which ranks talk over: install OpenMPI and libclang for its bindings (Debian: `apt-get install libopenmpi-dev openmpi-bin libclang-dev pkg-config`) and build with `cargo build --release --features mpi`",
            w.launcher.name(),
            w.size
        )
    }

    pub fn finish() {}

    pub fn abort(_code: i32) {}

    pub fn sum_f32(_data: &mut [f32]) -> Result<()> {
        Err(unbuilt())
    }

    pub fn sum_f64(_data: &mut [f64]) -> Result<()> {
        Err(unbuilt())
    }

    pub fn gather_bytes(_mine: &[u8], _size: usize) -> Result<Vec<Vec<u8>>> {
        Err(unbuilt())
    }

    pub fn barrier() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn world(vars: &[(&str, &str)]) -> Result<World> {
        World::from_vars(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()))
    }

    #[test]
    fn the_launchers_variables_give_the_rank() {
        assert_eq!(world(&[]).unwrap(), World::SINGLE);
        let w =
            world(&[("OMPI_COMM_WORLD_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "2"), ("OMPI_COMM_WORLD_LOCAL_RANK", "1")])
                .unwrap();
        assert_eq!((w.rank, w.size, w.local_rank, w.launcher), (1, 2, 1, Launcher::Mpirun));
        let w = world(&[("SLURM_PROCID", "3"), ("SLURM_STEP_NUM_TASKS", "4"), ("SLURM_LOCALID", "1")]).unwrap();
        assert_eq!((w.rank, w.size, w.local_rank, w.launcher), (3, 4, 1, Launcher::Srun));
        assert_eq!(w.describe(), "rank 3 of 4 (srun, local rank 1)");
        // A batch script has SLURM_PROCID but no job step: one process.
        assert_eq!(world(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "2")]).unwrap(), World::SINGLE);
        // mpirun inside an allocation: mpirun's variables win.
        let w = world(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_STEP_NUM_TASKS", "1"),
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
        ])
        .unwrap();
        assert_eq!((w.rank, w.launcher), (1, Launcher::Mpirun));
        let w = world(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "x")]).unwrap();
        assert_eq!((w.size, w.launcher), (2, Launcher::Torchrun));
        assert!(world(&[("RANK", "2"), ("WORLD_SIZE", "2")]).unwrap_err().to_string().contains("rank 2 of 2"));
        assert!(world(&[("RANK", "x"), ("WORLD_SIZE", "2")]).unwrap_err().to_string().contains("RANK=\"x\""));
    }
}
