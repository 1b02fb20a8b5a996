//! `ember`: inspect the machine, check every op against its f64 reference, benchmark against the
//! roofline, and print generated geometric-algebra kernels.

mod bench;
mod check;
mod ga;
mod info;
mod kernels;

use clap::{Parser, Subcommand};
use ember_core::DeviceRequest;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "ember", version, about = "Fused, differentiable GPU kernels for geometric and long-sequence deep learning")]
struct Cli {
    /// Device: auto (CUDA if usable, else CPU), cpu, cuda or cuda:N.
    #[arg(long, global = true, default_value = "auto")]
    device: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Backends, GPU, driver and NVRTC versions, kernel cache.
    Info,
    /// Every op, forward and backward, against the f64 CPU reference; exit code 1 on any failure.
    Check {
        /// Only this op family.
        #[arg(long)]
        op: Option<String>,
        /// quick (a few sizes), full (every awkward size, large ones too) or small.
        #[arg(long, default_value = "quick")]
        tier: String,
        /// Also write the rows as JSON.
        #[arg(long)]
        json: Option<String>,
    },
    /// Time fwd and fwd+bwd per dtype and shape, with roofline floors measured in the same run.
    Bench {
        /// Only this op family.
        #[arg(long)]
        op: Option<String>,
        /// Fewer, smaller sizes.
        #[arg(long)]
        quick: bool,
        /// Write device, ceilings and rows as JSON (input of bench/torch_ref.py and bench/merge.py).
        #[arg(long)]
        json: Option<String>,
    },
    /// Geometric algebra: print generated code.
    Ga {
        #[command(subcommand)]
        command: GaCommand,
    },
    /// Compile every kernel with NVRTC and print ptxas's resource report (no GPU needed).
    Kernels {
        /// Target architecture, e.g. sm_90a or sm_80.
        #[arg(long, default_value = "sm_90a")]
        arch: String,
        /// Only this op family.
        #[arg(long)]
        op: Option<String>,
        /// Only builds whose source name or NVRTC options contain this (e.g. "fc3", "GS_PP=1").
        #[arg(long)]
        only: Option<String>,
        /// Also write each CUBIN into this folder (for cuobjdump -sass).
        #[arg(long)]
        save: Option<String>,
        /// Instead of the report, compile everything into the kernel disk cache (EMBER_CACHE_DIR).
        #[arg(long)]
        fill_cache: bool,
    },
}

#[derive(Subcommand)]
enum GaCommand {
    /// Print the straight-line code ember-ga generates (with CSE) and its mul/add counts.
    Emit {
        /// Signature P,Q,R of Cl(p,q,r) (R may be omitted), e.g. 3,0,1.
        #[arg(long)]
        algebra: String,
        /// gp, wgp, sandwich, outer, inner, lcontract, rcontract, scalar, commutator, regressive, dual, norm2, ...
        #[arg(long)]
        expr: String,
        /// Also emit the vector-Jacobian product for every input.
        #[arg(long)]
        grad: bool,
        /// cuda, rust or ir.
        #[arg(long, default_value = "cuda")]
        lang: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let device: DeviceRequest = match cli.device.parse() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Info => info::run(device),
        Command::Check { op, tier, json } => check::run(device, op.as_deref(), &tier, json.as_deref()),
        Command::Bench { op, quick, json } => bench::run(device, op.as_deref(), quick, json.as_deref()),
        Command::Ga { command: GaCommand::Emit { algebra, expr, grad, lang } } => ga::emit_cmd(&algebra, &expr, grad, &lang),
        Command::Kernels { arch, op, only, save, fill_cache } => {
            if fill_cache {
                kernels::fill_cache(&arch, op.as_deref())
            } else {
                kernels::run(&arch, op.as_deref(), only.as_deref(), save.as_deref())
            }
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
