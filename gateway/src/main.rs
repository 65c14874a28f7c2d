//! The `hookgate` binary: everything lives in the library; see `hookgate::cli`.

/// mimalloc instead of glibc's malloc: the gateway allocates small objects on many threads
/// at once (requests, attempts, the writer), where glibc's arenas contend (BENCHMARKS.md,
/// "Second round"). The `system-allocator` feature keeps the C library's malloc, which heap
/// profilers see (scripts/count-allocations.sh).
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    hookgate::cli::main()
}
