use std::process::ExitCode;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    bertpipe::app::cli_signals();
    bertpipe::app::run(std::env::args_os())
}
