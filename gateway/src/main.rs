//! The `hookgate` binary: everything lives in the library; see `hookgate::cli`.

fn main() -> std::process::ExitCode {
    hookgate::cli::main()
}
